"""Debian's redis-server for the tests of cosid.distributor = 'cosid_redis': one per test, on
loopback, in memory only (no snapshot, no append-only file) unless told to keep its data, in a
directory of its own; and a client speaking Redis's wire protocol (RESP2) to it, for the Java
participant and the checks."""

import shutil
import socket
import subprocess
import tempfile

from .pgcluster import wait_for


class RedisError(Exception):
    pass


class RedisClient:
    def __init__(self, port, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.reader = self.sock.makefile("rb")

    def close(self):
        self.reader.close()
        self.sock.close()

    def call(self, *args):
        parts = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            data = str(arg).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(parts))
        return self.reply()

    def reply(self):
        line = self.reader.readline()
        if not line.endswith(b"\r\n"):
            raise RedisError("connection closed")
        kind, body = line[:1], line[1:-2]
        if kind == b"+":
            return body.decode()
        if kind == b"-":
            raise RedisError(body.decode())
        if kind == b":":
            return int(body)
        if kind == b"$":
            if int(body) < 0:
                return None
            data = self.reader.read(int(body) + 2)
            return data[:-2].decode()
        if kind == b"*":
            return None if int(body) < 0 else [self.reply() for _ in range(int(body))]
        raise RedisError(f"unexpected reply {line!r}")

    def eval(self, script, key, *args):
        return self.call("EVAL", script, 1, key, *args)


class RedisServer:
    def __init__(self, port, persistent=False):
        """persistent: an append-only file written at every command, which a restart reads
        back (a Redis that keeps its data across a crash)."""
        self.port = port
        self.persistent = persistent
        self.dir = tempfile.mkdtemp(prefix="cosid-redis-")
        self.process = None

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self):
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes" if self.persistent else "no", "--appendfsync", "always",
             "--dir", self.dir, "--logfile", f"{self.dir}/redis.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self.answers, 30, f"redis-server on port {self.port} to answer")
        return self

    def answers(self):
        try:
            client = RedisClient(self.port, timeout=2)
        except OSError:
            return False
        try:
            return client.call("PING") == "PONG"
        except RedisError as error:
            # A restart with an append-only file answers LOADING until it has read it.
            if str(error).startswith("LOADING"):
                return False
            raise
        finally:
            client.close()

    def client(self):
        return RedisClient(self.port)

    def call(self, *args):
        client = self.client()
        try:
            return client.call(*args)
        finally:
            client.close()

    def restart(self):
        """Kills the server (-9) and starts it again on its port: it comes back empty, as a
        Redis without persistence does, unless it is persistent (then with every write it
        acknowledged, under a new run id)."""
        self.process.kill()
        self.process.wait()
        return self.start()

    def kill(self):
        """Kills the server (-9), to be started again with start()."""
        self.process.kill()
        self.process.wait()

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
