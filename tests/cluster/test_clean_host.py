"""`make install` on a machine that has only its PostgreSQL and a Rust toolchain: a Debian 12
system made afresh (mmdebstrap, minbase) in a folder, where Debian's PostgreSQL 15 is installed
as a DBA's server is, the project's files are copied in, and this machine's Rust toolchain
(mounted read-only) and its cargo-pgrx 0.18.1 are put on the path (the one `scripts/setup.sh
--build` would otherwise spend 12 minutes installing). There, `make install PG=15` alone installs
the build's packages and nothing of the test stack, downloads the crates and builds from nothing,
and installs into that PostgreSQL, which then loads cosid and generates."""

import os
import shutil
import subprocess
import tarfile
import time
import unittest
from pathlib import Path

from helpers.pgcluster import PG_MAJOR, ROOT, free_port, wait_for

HOST = ROOT / "target" / "clean-host"
# What make test installs and make install must not.
TEST_STACK_PACKAGES = ("etcd-server", "redis-server", "prometheus", "prometheus-postgres-exporter",
                       "python3-venv", "nodejs", "npm")


def run(command, log, timeout=1200, check=True):
    """Runs a command, its output appended to `log`; the output when it fails."""
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(map(str, command))}\n")
        out.flush()
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{command[:4]} failed ({done.returncode}):\n"
                             f"{log.read_text()[-4000:]}")
    return done


def mounted_under(folder):
    """The mount points at or under `folder`, deepest first."""
    points = []
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            point = line.split()[1].replace("\\040", " ")
            if point == str(folder) or point.startswith(f"{folder}/"):
                points.append(point)
    return sorted(points, key=len, reverse=True)


def remove_system(root):
    """Unmounts what is mounted in the system at `root`, then removes it, never crossing into
    another file system (a mount left behind is left, and the removal fails loudly)."""
    for point in mounted_under(root):
        subprocess.run(["umount", "--lazy", point], check=False)
    left = mounted_under(root)
    if left:
        raise AssertionError(f"still mounted, not removed: {left}")
    if root.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=True)


@unittest.skipIf(PG_MAJOR != 15, "Debian 12 packages PostgreSQL 15: run on 15")
@unittest.skipIf(os.geteuid() != 0, "a system in a folder (chroot) needs root")
class CleanHost(unittest.TestCase):
    def test_make_install_alone_on_a_machine_with_only_postgresql(self):
        port = free_port(25990)
        root = HOST / str(port)
        log = HOST / f"{port}.log"
        HOST.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        remove_system(root)
        self.addCleanup(remove_system, root)
        started = time.monotonic()
        run(["mmdebstrap", "--variant=minbase", "--include=ca-certificates,make",
             "bookworm", str(root)], log)
        run(["mount", "-t", "proc", "proc", str(root / "proc")], log)
        sysroot = subprocess.run(["rustc", "--print", "sysroot"], check=True, text=True,
                                 stdout=subprocess.PIPE).stdout.strip()
        (root / sysroot.lstrip("/")).mkdir(parents=True)
        run(["mount", "--bind", sysroot, str(root / sysroot.lstrip("/"))], log)
        run(["mount", "-o", "remount,bind,ro", str(root / sysroot.lstrip("/"))], log)
        cargo_bin = root / "root" / ".cargo" / "bin"
        cargo_bin.mkdir(parents=True)
        shutil.copy2(shutil.which("cargo-pgrx"), cargo_bin / "cargo-pgrx")
        # This machine's network as the new system's: its resolver and the certificate
        # authorities it adds (a proxy's, say), for the downloads of crates.
        shutil.copy2("/etc/resolv.conf", root / "etc" / "resolv.conf")
        local_cas = Path("/usr/local/share/ca-certificates")
        for ca in local_cas.glob("*.crt") if local_cas.is_dir() else ():
            shutil.copy2(ca, root / "usr" / "local" / "share" / "ca-certificates" / ca.name)
        # The project as a checkout has it: its files, not what it built.
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=ROOT, check=True,
                                stdout=subprocess.PIPE).stdout.decode().split("\0")
        with tarfile.open(HOST / f"{port}-src.tar", "w") as archive:
            for name in filter(None, listed):
                if (ROOT / name).exists():
                    archive.add(ROOT / name, arcname=f"src/{name}", recursive=False)
        with tarfile.open(HOST / f"{port}-src.tar") as archive:
            archive.extractall(root, filter="tar")
        os.remove(HOST / f"{port}-src.tar")

        def inside(script, timeout=1200, check=True):
            # At the lowest priority: the suite's other jobs, which wait on lease timings, come
            # first on the processor; this one takes what they leave.
            return run(["nice", "-n", "19", "chroot", str(root), "/usr/bin/env", "-i", "HOME=/root",
                        f"PATH=/root/.cargo/bin:{sysroot}/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        "DEBIAN_FRONTEND=noninteractive", "LANG=C.UTF-8", "/bin/bash", "-ec",
                        script], log, timeout=timeout, check=check)

        def packages():
            inside("dpkg-query -W -f '${Package}\\n' > /tmp/packages.txt")
            return set((root / "tmp" / "packages.txt").read_text().split())

        inside("update-ca-certificates >/dev/null")
        # The DBA's server.
        inside("apt-get update -qq && apt-get install -y -qq postgresql-15 >/dev/null")
        before = packages()
        # From nothing, at the lowest priority beside the suite: 222 s alone, 658 s and more
        # than 1,200 s beside it in runs here; the job's own limit (an hour) bounds it.
        inside("cd /src && make install PG=15", timeout=3300)
        added = packages() - before
        self.assertIn("postgresql-server-dev-15", added)
        self.assertIn("clang", added)
        self.assertFalse(added & set(TEST_STACK_PACKAGES), added & set(TEST_STACK_PACKAGES))
        self.assertFalse((root / "opt" / "cosid-postgres").exists(), "the tests' PostgreSQL builds")
        self.assertFalse((root / "src" / "target" / "patroni").exists(), "Patroni")
        # The server loads it and generates.
        conf = root / "etc" / "postgresql" / "15" / "main" / "postgresql.conf"
        conf.write_text(conf.read_text() + f"\nport = {port}\n"
                        "shared_preload_libraries = 'cosid'\nlisten_addresses = ''\n")
        inside("pg_ctlcluster 15 main start")
        self.addCleanup(inside, "pg_ctlcluster 15 main stop -m immediate", check=False)
        psql = f"runuser -u postgres -- psql -p {port} -Atq -c "
        inside(psql + "'CREATE EXTENSION cosid'")
        wait_for(lambda: inside(psql + "\"SELECT 1 FROM cosid.status WHERE state = 'UP'\" "
                                "| grep -qx 1", check=False).returncode == 0,
                 60, f"the lease in the new system:\n{log.read_text()[-2000:]}")
        inside(psql + "'SELECT (cosid_decode(cosid_next())).machine_id' | grep -qx 0")
        print(f"\n  made, built and installed from nothing in {time.monotonic() - started:.0f} s;"
              f" {len(added)} packages added by make install, none of the test stack", end=" ")


if __name__ == "__main__":
    unittest.main()
