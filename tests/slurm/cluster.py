"""A real Slurm on this host for the slurm suite (docs/cluster.md, "Slurm"): Debian 12's munge and
slurm-wlm (installed with apt-get when missing), one munged on its own key and socket, one
slurmctld and three slurmd (gpu1 in partition gpu, cpu1 and cpu2 in partition cpu), each slurmd a
process of its own with its own node name and port. Everything lives in one temporary folder
(config, state, spools, logs, the key); close() stops exactly the daemons it started, by their
pids, and removes the folder. Nothing under /etc, /run or /var is touched beyond what apt-get
installs.

Skip() is raised, with the reason, only where Slurm cannot run here: not root, or the packages
cannot be installed."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

PACKAGES = ["slurm-wlm", "munge", "openssl"]
NEEDED = ["/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch",
          "/usr/bin/openssl"]
POLICY = "/usr/sbin/policy-rc.d"


class Skip(Exception):
    pass


def apt_get(*args):
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(["apt-get"] + list(args), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)


def ensure_packages():
    """Installs munge and slurm-wlm when missing (as root); raises Skip when that cannot be."""
    if all(os.path.exists(p) for p in NEEDED):
        return
    if os.geteuid() != 0:
        raise Skip("Slurm is not installed and installing it needs root (apt-get install %s)"
                   % " ".join(PACKAGES))
    if shutil.which("apt-get") is None:
        raise Skip("Slurm is not installed and there is no apt-get to install it")
    # The packages' scripts would start munge, slurmctld and slurmd as services on the system's
    # config; a policy-rc.d that says no (where none is) keeps them from it: this suite starts
    # the daemons it needs itself and stops them.
    policy = not os.path.exists(POLICY)
    if policy:
        with open(POLICY, "w") as f:
            f.write("#!/bin/sh\n# the slurm suite's, while it installs packages\nexit 101\n")
        os.chmod(POLICY, 0o755)
    try:
        r = apt_get("install", "-y", "--no-install-recommends", *PACKAGES)
        if r.returncode != 0:
            apt_get("update")
            r = apt_get("install", "-y", "--no-install-recommends", *PACKAGES)
    finally:
        if policy:
            os.unlink(POLICY)
    if r.returncode != 0 or not all(os.path.exists(p) for p in NEEDED):
        raise Skip("apt-get install %s failed: %s" % (" ".join(PACKAGES), r.stdout[-800:]))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, check, limit_s, step_s=0.2):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(step_s)
    raise AssertionError("%s: not within %.0f s" % (what, limit_s))


class Cluster:
    NODES = [("gpu1", "gpu"), ("cpu1", "cpu"), ("cpu2", "cpu")]

    def __init__(self):
        if os.geteuid() != 0:
            raise Skip("the slurm suite starts munged, slurmctld and slurmd, which need root")
        ensure_packages()
        self.dir = tempfile.mkdtemp(prefix="stoker-slurm-")
        os.chmod(self.dir, 0o755)
        self.pids = []  # (name, pid) of every daemon started, in order
        self.host = socket.gethostname()
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        try:
            self._munge()
            self._config()
            self._start()
        except BaseException:
            self.close()
            raise

    def path(self, *names):
        return os.path.join(self.dir, *names)

    def _munge(self):
        mdir = self.path("munge")
        os.mkdir(mdir, 0o700)
        key = os.path.join(mdir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        self.munge_socket = os.path.join(mdir, "munge.socket")
        # --force: munged as root, on a key and socket of its own (not the system's).
        subprocess.run(["/usr/sbin/munged", "--force", "--key-file", key, "--socket",
                        self.munge_socket, "--pid-file", os.path.join(mdir, "munged.pid"),
                        "--log-file", os.path.join(mdir, "munged.log"), "--seed-file",
                        os.path.join(mdir, "munged.seed")], check=True, timeout=30)
        pid = wait_for("munged writes its pid file",
                       lambda: self._read_pid(os.path.join(mdir, "munged.pid")), 10)
        self.pids.append(("munged", pid))

    @staticmethod
    def _read_pid(path):
        try:
            with open(path) as f:
                return int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _config(self):
        self.ctld_port = free_port()
        self.node_ports = {name: free_port() for name, _ in self.NODES}
        for d in ["state", "spool"] + ["spool/" + n for n, _ in self.NODES]:
            os.mkdir(self.path(d))
        lines = [
            "ClusterName=stoker",
            "SlurmctldHost=%s(127.0.0.1)" % self.host,
            "SlurmctldPort=%d" % self.ctld_port,
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            "AuthInfo=socket=%s" % self.munge_socket,
            "StateSaveLocation=%s" % self.path("state"),
            "SlurmdSpoolDir=%s" % self.path("spool", "%n"),
            "SlurmctldPidFile=%s" % self.path("slurmctld.pid"),
            "SlurmdPidFile=%s" % self.path("slurmd-%n.pid"),
            "SlurmctldLogFile=%s" % self.path("slurmctld.log"),
            "SlurmdLogFile=%s" % self.path("slurmd-%n.log"),
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            # The nodes say more CPUs than this host has: producers mostly sleep.
            "SlurmdParameters=config_overrides",
            "SchedulerType=sched/backfill",
            # A heterogeneous job is started by the backfill scheduler: every second, not 30 s.
            "SchedulerParameters=bf_interval=1,sched_interval=1",
            "ReturnToService=2",
            "KillWait=10",
            "MinJobAge=60",
            "InactiveLimit=0",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
        ]
        for name, _ in self.NODES:
            lines.append("NodeName=%s NodeHostname=%s NodeAddr=127.0.0.1 Port=%d CPUs=8 "
                         "RealMemory=1000 State=UNKNOWN" % (name, self.host, self.node_ports[name]))
        parts = {}
        for name, part in self.NODES:
            parts.setdefault(part, []).append(name)
        for part, nodes in parts.items():
            lines.append("PartitionName=%s Nodes=%s MaxTime=INFINITE State=UP%s"
                         % (part, ",".join(nodes), " Default=YES" if part == "cpu" else ""))
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        # No cgroups here (proctrack/linuxproc, task/none); an empty cgroup.conf keeps slurmd
        # from reading the system's.
        with open(self.path("cgroup.conf"), "w") as f:
            f.write("# no cgroups: proctrack/linuxproc, task/none\n")

    def _start(self):
        subprocess.run(["/usr/sbin/slurmctld", "-f", self.conf, "-i"], check=True, env=self.env,
                       timeout=30)
        pid = wait_for("slurmctld writes its pid file",
                       lambda: self._read_pid(self.path("slurmctld.pid")), 15)
        self.pids.append(("slurmctld", pid))
        for name, _ in self.NODES:
            subprocess.run(["/usr/sbin/slurmd", "-f", self.conf, "-N", name], check=True,
                           env=self.env, timeout=30)
            pid = wait_for("slurmd %s writes its pid file" % name,
                           lambda: self._read_pid(self.path("slurmd-%s.pid" % name)), 15)
            self.pids.append(("slurmd " + name, pid))
        wait_for("every node idle (sinfo)", self._all_idle, 60, 0.5)

    def _all_idle(self):
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        states = dict(l.split() for l in r.stdout.splitlines() if len(l.split()) == 2)
        return all(states.get(n) == "idle" for n, _ in self.NODES)

    def run(self, *args, check=True, timeout=30):
        r = subprocess.run(list(args), env=self.env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError("%s exited %d: %s" % (" ".join(args), r.returncode, r.stderr))
        return r.stdout

    def job_state(self, job):
        """The job's state (RUNNING, COMPLETED, CANCELLED, ...) and exit code "A:B", as
        scontrol shows it (MinJobAge keeps ended jobs there for a minute); of a heterogeneous
        job, its leader's (component 0, whose batch script gives the exit code)."""
        out = self.run("scontrol", "-o", "show", "job", str(job), check=False)
        for line in out.splitlines():
            fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
            if fields.get("HetJobOffset", "0") == "0":
                return fields.get("JobState"), fields.get("ExitCode")
        return None, None

    def logs(self):
        out = []
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".log"):
                with open(self.path(name), errors="replace") as f:
                    out.append("== %s ==\n%s" % (name, f.read()[-3000:]))
        return "\n".join(out)

    def close(self):
        # Jobs first (their processes are children of the slurmd), then the daemons: each by
        # its pid, waited for, killed after 15 s.
        if any(n == "slurmctld" for n, _ in self.pids):
            subprocess.run(["scancel", "--full", "--user", "root"], env=self.env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
            time.sleep(1)
        # The slurmd together, then slurmctld and munged (each takes about 2 s to stop).
        slurmd = [(n, p) for n, p in self.pids if n.startswith("slurmd")]
        self._stop(slurmd)
        self._stop([(n, p) for n, p in self.pids if (n, p) not in slurmd])
        self.pids = []
        shutil.rmtree(self.dir, ignore_errors=True)

    @staticmethod
    def _stop(daemons):
        """SIGTERM to each, waited for together; SIGKILL to those alive after 15 s."""
        for name, pid in daemons:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(os.path.exists("/proc/%d" % p)
                                                  for _, p in daemons):
            time.sleep(0.05)
        for name, pid in daemons:
            if os.path.exists("/proc/%d" % pid):
                print("%s (pid %d) did not stop within 15 s: killed" % (name, pid))
                os.kill(pid, signal.SIGKILL)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
