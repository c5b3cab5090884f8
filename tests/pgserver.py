"""A real PostgreSQL server for the store tests: Debian's binaries (initdb, pg_ctl) in a temporary directory,
listening on 127.0.0.1 on a free port, one for the whole pytest session, stopped at exit. Postgres refuses to run
as root, so under root (CI) it runs as the `postgres` user (else `nobody`) through runuser or setpriv.

    url = pgserver.database()     # a new empty database on the shared server, as a SQLAlchemy URL
"""
from __future__ import annotations

import atexit
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from functools import lru_cache

USER, PASSWORD = "tcperf", "s3cret-pw"
_count = itertools.count()


def binaries() -> str | None:
    """The newest /usr/lib/postgresql/N/bin holding initdb and pg_ctl, else None."""
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]))
    dirs = [d for d in dirs if os.path.exists(f"{d}/initdb") and os.path.exists(f"{d}/pg_ctl")]
    return dirs[-1] if dirs else None


def _account() -> pwd.struct_passwd | None:
    """The unprivileged user the server runs as when we are root (postgres refuses root); None otherwise."""
    if os.getuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            pass
    raise RuntimeError("running as root with neither a postgres nor a nobody user to run the server as")


def _as_user() -> list[str]:
    """The prefix that runs a server command as that user: runuser, else setpriv; [] when not root."""
    who = _account()
    if who is None:
        return []
    if shutil.which("runuser"):
        return ["runuser", "-u", who.pw_name, "--"]
    return ["setpriv", f"--reuid={who.pw_uid}", f"--regid={who.pw_gid}", "--clear-groups"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, bin_dir: str):
        self.bin, self.dir = bin_dir, tempfile.mkdtemp(prefix="tcperf-pg-")
        self.data, self.port = f"{self.dir}/data", _free_port()
        with open(f"{self.dir}/pw", "w") as f:
            f.write(PASSWORD)
        who = _account()
        if who is not None:
            for path in (self.dir, f"{self.dir}/pw"):
                os.chown(path, who.pw_uid, who.pw_gid)

    def _run(self, *args: str) -> None:
        cmd = [*_as_user(), *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if done.returncode:
            raise RuntimeError(f"{' '.join(args)} failed: {done.stdout}{done.stderr}{self.log()}")

    def log(self) -> str:
        try:
            return open(f"{self.dir}/log").read()[-2000:]
        except OSError:
            return ""

    def start(self) -> "Server":
        self._run(f"{self.bin}/initdb", "-D", self.data, "-U", USER, f"--pwfile={self.dir}/pw",
                  "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-sync")
        # fsync off: a test server's durability is not under test here (a killed *client* is)
        opts = (f"-h 127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off -c synchronous_commit=off "
                f"-c full_page_writes=off -c max_connections=100")
        self._run(f"{self.bin}/pg_ctl", "-D", self.data, "-l", f"{self.dir}/log", "-o", opts, "-w", "start")
        atexit.register(self.stop)
        return self

    def stop(self) -> None:
        subprocess.run([*_as_user(), f"{self.bin}/pg_ctl", "-D", self.data, "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, db: str = "postgres", password: str = PASSWORD) -> str:
        return f"postgresql+psycopg://{USER}:{password}@127.0.0.1:{self.port}/{db}"

    def create_database(self) -> str:
        import psycopg
        name = f"t{os.getpid()}_{next(_count)}"
        with psycopg.connect(self.url().replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} STRATEGY FILE_COPY")
        return self.url(name)


@lru_cache(maxsize=None)
def server() -> Server:
    return Server(binaries()).start()


def database() -> str:
    """A new empty database on the session's server, as a SQLAlchemy URL (with the password)."""
    return server().create_database()


def database_or_skip() -> str:
    """database(), or the test skips with the reason (fails instead where $TCPERF_REQUIRE_POSTGRES is set, as in CI)."""
    import pytest
    why = None
    if binaries() is None:
        why = "PostgreSQL's initdb/pg_ctl not found under /usr/lib/postgresql/*/bin (apt-get install postgresql)"
    else:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            why = "psycopg is not installed (pip install -e '.[postgres]')"
    if why and os.environ.get("TCPERF_REQUIRE_POSTGRES"):
        pytest.fail(why)
    if why:
        pytest.skip(why)
    return database()
