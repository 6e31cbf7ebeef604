"""A recording stand-in for ``python`` in tests of launch/slurm/sweep.sh (tests/test_cluster_docs.py).

``fake_submit.py ARRAY_ID training/grpo.py -m OVERRIDES...`` prints the command's arguments as one JSON line and,
as submitit does when it submits a several-job array, creates ``<hydra.sweep.dir>/.submitit/<id>_<index>`` for every
job of the sweep (comma list of ``experiment=``; one job: ``<id>``, a plain job), so that sweep.sh can find a row's
job id. ``<id>`` is ARRAY_ID, or one more than the largest id already in that folder (a second run of the sweep).
"""

import json
import sys
from pathlib import Path


def main() -> None:
    first_id, argv = int(sys.argv[1]), sys.argv[2:]
    sys.stdout.write(json.dumps(argv) + "\n")  # one write: sweep.sh runs two of these at once
    sys.stdout.flush()
    sweep_dir = next((a.split("=", 1)[1] for a in argv if a.startswith("hydra.sweep.dir=")), None)
    experiments = next((a.split("=", 1)[1] for a in argv if a.startswith("experiment=")), "")
    if sweep_dir:
        folder = Path(sweep_dir) / ".submitit"
        taken = [int(p.name.split("_")[0]) for p in folder.glob("*") if p.name.split("_")[0].isdigit()]
        job_id = max(taken) + 1 if taken else first_id
        names = [f"{job_id}_{i}" for i in range(len(experiments.split(",")))] if "," in experiments else [str(job_id)]
        for name in names:
            (folder / name).mkdir(parents=True, exist_ok=True)


if __name__ == "__main__":  # a script (pytest's doctest collection imports it)
    main()
