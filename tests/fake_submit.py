"""A recording stand-in for ``python`` in tests of launch/slurm/sweep.sh (tests/test_cluster_docs.py).

``fake_submit.py ARRAY_ID training/grpo.py -m OVERRIDES...`` prints the command's arguments as one JSON line and,
as submitit does when it submits a several-job array, creates ``<hydra.sweep.dir>/.submitit/<ARRAY_ID>_<index>``
for every job of the sweep (comma list of ``experiment=``), so that sweep.sh can find a row's job id.
"""

import json
import sys
from pathlib import Path

array_id, argv = sys.argv[1], sys.argv[2:]
sys.stdout.write(json.dumps(argv) + "\n")  # one write: sweep.sh runs two of these at once
sys.stdout.flush()
sweep_dir = next((a.split("=", 1)[1] for a in argv if a.startswith("hydra.sweep.dir=")), None)
experiments = next((a.split("=", 1)[1] for a in argv if a.startswith("experiment=")), "")
if sweep_dir and "," in experiments:
    for i, _ in enumerate(experiments.split(",")):
        (Path(sweep_dir) / ".submitit" / f"{array_id}_{i}").mkdir(parents=True, exist_ok=True)
