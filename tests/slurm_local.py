"""A real single-host SLURM for tests: munged, slurmctld and slurmd from Debian's slurm-wlm in a temp dir.

``LocalSlurm(root).start()`` writes a slurm.conf naming this host as the controller and its one node
(``CPUs=2``, ``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none``, no cgroup.conf), starts
munged (as the ``munge`` user, its own socket) and both SLURM daemons on free ports, and waits until
the node is idle; ``env()`` is the environment in which ``sbatch``/``squeue``/``sacct`` talk to it;
``stop()`` ends the three daemons it started (by their pids) and nothing else.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from verifier.serve import free_port

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch")


def missing() -> list[str]:
    """The programs of slurm-wlm / munge that are not installed (empty: a local SLURM can start)."""
    return [d for d in DAEMONS if shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists()]


def _exe(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class LocalSlurm:
    def __init__(self, root: Path, cpus: int = 2):
        self.root = Path(root)
        self.cpus = cpus
        self.host = socket.gethostname().split(".")[0]
        self.procs: dict[str, subprocess.Popen] = {}
        self.conf = self.root / "slurm.conf"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        return env

    def _write_conf(self) -> None:
        r = self.root
        for d in ("state", "spool", "log"):
            (r / d).mkdir(parents=True, exist_ok=True)
        # munged runs as the munge user: its folder must be reachable by it (pytest's tmp folders are 0700)
        self.munge_dir = Path(tempfile.mkdtemp(prefix="pv-munge-"))
        self.munge_socket = self.munge_dir / "munge.socket.2"
        self.conf.write_text(f"""\
ClusterName=pvtest
SlurmctldHost={self.host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={r / "state"}
SlurmdSpoolDir={r / "spool"}
SlurmctldPidFile={r / "slurmctld.pid"}
SlurmdPidFile={r / "slurmd.pid"}
SlurmctldLogFile={r / "log" / "slurmctld.log"}
SlurmdLogFile={r / "log" / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
KillWait=30
InactiveLimit=0
MinJobAge=600
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN
PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
""")

    def _munged(self) -> None:
        r = self.munge_dir
        key = Path("/etc/munge/munge.key")
        if not key.exists():
            key = r / "munge.key"
            subprocess.run([_exe("mungekey"), "--create", f"--keyfile={key}"], check=True)
        m = pwd.getpwnam("munge")
        for p in (r, key) if key.parent == r else (r,):
            os.chown(p, m.pw_uid, m.pw_gid)
        os.chmod(r, 0o755)  # munged: the socket folder must be reachable by all
        cmd = [_exe("munged"), "--foreground", f"--socket={self.munge_socket}", f"--key-file={key}",
               f"--pid-file={r / 'munged.pid'}", f"--log-file={r / 'munged.log'}", f"--seed-file={r / 'munged.seed'}"]
        if os.getuid() == 0:
            cmd = [_exe("runuser"), "-u", "munge", "--", *cmd]
        self.procs["munged"] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self._wait(lambda: self.munge_socket.exists(), "munged socket", self.procs["munged"])

    def _wait(self, ok, what: str, proc: subprocess.Popen | None = None, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{what}: the daemon exited with {proc.returncode}; logs in {self.root}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not ready after {timeout}s; logs in {self.root}")
            time.sleep(0.5)

    def _idle(self) -> bool:
        p = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=self.env(), capture_output=True, text=True)
        return p.returncode == 0 and p.stdout.strip() == "idle"

    def start(self) -> "LocalSlurm":
        self._write_conf()
        self._munged()
        env = self.env()
        log = open(self.root / "log" / "daemons.out", "ab")
        self.procs["slurmctld"] = subprocess.Popen([_exe("slurmctld"), "-D", "-i", "-f", str(self.conf)], env=env,
                                                   stdout=log, stderr=subprocess.STDOUT)
        self.procs["slurmd"] = subprocess.Popen([_exe("slurmd"), "-D", "-f", str(self.conf), "-N", self.host], env=env,
                                                stdout=log, stderr=subprocess.STDOUT)
        self._wait(self._idle, "SLURM node idle", timeout=120)
        return self

    def stop(self) -> None:
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.pop(name, None)
            if p is None or p.poll() is not None:
                continue
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        if getattr(self, "munge_dir", None) is not None:
            shutil.rmtree(self.munge_dir, ignore_errors=True)

    def __enter__(self) -> "LocalSlurm":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
