# medgym sandbox bootstrap. Runs inside the sandbox only.
#   boot.py run CODEFILE   run one program (cold backend)
#   boot.py serve FD       fork server on socket FD (warm backend)
#   boot.py listen PATH    docker backend: the container's pid 1. Forks the
#                          fork server, which listens on the unix socket
#                          PATH, accepts exactly one connection (the
#                          worker's), removes PATH and serves on it as
#                          `serve` does; pid 1 reaps orphans (as init of the
#                          pid namespace it is immune to the code's signals
#                          and to the kill(-1) that ends every run) and
#                          exits when the server does
import os
import sys

COMPILE_MARK = "\x00MEDGYM_COMPILE_ERROR\n"
CODE_PATH = "/tmp/main.py"


def _exit_code(e):
    c = e.code
    if c is None:
        return 0
    if isinstance(c, int):
        return c & 0xFF
    try:
        sys.stderr.write(str(c) + "\n")
    except Exception:
        pass
    return 1


# Warm backend: the write end of the pipe on which a finished child tells
# the server its exit code, so the server answers before the child's big
# address space is torn down.
_REPORT_FD = -1


def _finish(code):
    try:
        import threading
        threading._shutdown()
    except BaseException:
        pass
    try:
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    if _REPORT_FD >= 0:
        try:
            import resource
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            # Close the output first: the worker reads it to EOF.
            os.close(1)
            os.close(2)
            os.write(_REPORT_FD, b"X%d %d\n" % (code, rss))
        except BaseException:
            pass
    os._exit(code)


def run_code(path, src):
    import traceback
    try:
        code = compile(src, path, "exec")
    except (SyntaxError, ValueError, OverflowError) as e:
        sys.stderr.write(COMPILE_MARK + "".join(traceback.format_exception_only(type(e), e)))
        _finish(2)
    import builtins
    sys.argv = [path]
    sys.path[0] = os.path.dirname(path)
    g = {"__name__": "__main__", "__file__": path, "__builtins__": builtins, "__doc__": None, "__package__": None}
    rc = 0
    try:
        exec(code, g)
    except SystemExit as e:
        rc = _exit_code(e)
    except BaseException as e:
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        rc = 1
    _finish(rc)


def _killall_others():
    # kill(-1) signals every process we may signal except init and ourselves:
    # in the sandbox's pid namespace that is everything the run left behind.
    # The fork server is that namespace's init: what the run started is its
    # child, or becomes one (orphans are reparented to init before their
    # parent can be reaped), so blocking waits reap them all without a
    # polling loop's wake-ups; the loop below then only confirms it.
    import time
    if os.getpid() == 1:
        try:
            os.kill(-1, 9)
            while True:
                os.waitpid(-1, 0)
        except OSError:
            pass  # ECHILD: all reaped (or ESRCH: nothing to kill)
    for _ in range(500):
        try:
            os.kill(-1, 9)
        except OSError:
            return  # ESRCH: nothing left
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.001)


def _set_dumpable(on):
    # The fork server and the docker backend's pid 1 are not dumpable: code
    # of a run, under the same uid, can then neither ptrace them nor open
    # their /proc/PID/mem (Docker's seccomp profile allows ptrace), so every
    # run forks from the same pristine server. Each run's child is made
    # dumpable again, so its own /proc/self stays usable.
    try:
        import ctypes
        ctypes.CDLL(None).prctl(4, 1 if on else 0, 0, 0, 0)  # PR_SET_DUMPABLE
    except Exception:
        pass


def _child(req, fds, sockfd, report):
    global _REPORT_FD
    import signal
    out, err, codefd = fds
    os.setsid()
    _set_dumpable(True)
    src = b""
    while True:  # empty when the code came in the request
        b = os.read(codefd, 1 << 16)
        if not b:
            break
        src += b
    os.close(codefd)
    if req.get("inline"):
        src = req.get("code", "").encode("utf-8")
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in (null, out, err, sockfd):
        try:
            os.close(fd)
        except OSError:
            pass
    for s in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)
    lim = req["limits"]
    _set_limits(lim)
    # The server runs without PYTHONPATH (the worker unsets it), so nothing
    # the episode wrote to its workspace is imported before a run; the run
    # gets it back, with sys.path as a cold run has it.
    pp = req.get("pythonpath")
    if pp:
        os.environ["PYTHONPATH"] = pp
        sys.path[1:1] = pp.split(":")
    os.chdir(req["cwd"])
    if req["mode"] == "shell":
        # report is close-on-exec: the shell's status comes from wait4.
        try:
            os.execve("/bin/sh", ["sh", "-c", src.decode("utf-8", "replace")], dict(os.environ))
        finally:
            os._exit(127)
    text = src.decode("utf-8", "replace")
    with open(CODE_PATH, "w") as f:
        f.write(text)
    _REPORT_FD = report
    run_code(CODE_PATH, text)


def _warm_steps():
    # Run in the server before it serves, and again in each standby child
    # while it waits: the child then already holds its own copies of the
    # pages typical analysis code touches (copy-on-write faults happen off
    # the critical path) and pandas' lazy imports and caches are filled.
    # Small steps, so a standby child can stop as soon as a request waits.
    import io
    import numpy as np
    import pandas as pd
    csv = "g,v,w\na,1,0.5\nb,2,1.5\na,3,2.5\n"

    def frames():
        return pd.read_csv(io.StringIO(csv)), pd.DataFrame({"g": ["a", "b", "a", "c"], "v": [1, 2, 3, 4]})

    def groupby():
        for d in frames():
            gb = d.groupby("g")
            gb["v"].sum().to_dict()
            str(gb["v"].sum())
            gb.size()

    def aggs():
        for d in frames():
            gb = d.groupby("g")
            gb["v"].agg(["sum", "mean", "count", "min", "max", "std"]).to_dict()
            gb.mean(numeric_only=True)
            d["g"].value_counts().to_dict()

    def show():
        for d in frames():
            repr(d)
            d.describe()

    def reshape():
        a, b = frames()
        a.merge(b, on="g").sort_values("v_x").head()
        a[a["v"] > 1].reset_index(drop=True).to_csv(io.StringIO())
        pd.concat([a, a]).drop_duplicates().pivot_table(index="g", values="v", aggfunc="sum")
        np.asarray(a["v"]).mean()

    return [groupby, aggs, show, reshape]


def _warm(stop=None):
    try:
        for step in _warm_steps():
            if stop is not None and stop():
                return
            step()
    except BaseException:
        pass


class _Waiting(BaseException):
    pass


def _warm_until(sock):
    # A standby child's warm-up gives way to a request at once: a step takes
    # milliseconds (tens on a loaded machine), and with a fast model the
    # next turn's request arrives a few milliseconds after the previous
    # reply. Every millisecond a timer signal looks at the socket and, once
    # a request waits, ends the warm-up with an exception between two
    # bytecodes. The warm-up only touches what the server already imported
    # and cached (it ran the same steps before it served), so cutting a step
    # short leaves nothing half-initialised, only pages not yet copied.
    import select
    import signal
    state = {"armed": True}

    def tick(signum, frame):
        if state["armed"] and select.select([sock], [], [], 0)[0]:
            state["armed"] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            raise _Waiting()

    signal.signal(signal.SIGALRM, tick)
    try:
        # tick disarms the timer before it raises; without a raise, the
        # finally clause does. Either way no tick follows.
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
            _warm(lambda: bool(select.select([sock], [], [], 0)[0]))
        finally:
            state["armed"] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Waiting:
        pass
    # A tick already pending is dropped: Python skips a tripped signal
    # whose handler is the default by then.
    signal.signal(signal.SIGALRM, signal.SIG_DFL)


def _standby(sock, sockfd, report, first):
    # A pre-forked child: the fork (page-table copy of a ~150 MB
    # interpreter) already happened while the server was idle.
    import json
    import select
    import socket
    if first:
        # The server counts as ready only once its first standby child is.
        _warm()
        sock.send(b'{"ready":true}')
    else:
        _warm_until(sock)
    try:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 8)
    except OSError:
        os._exit(121)
    if not msg:
        os._exit(121)  # the worker closed the socket
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"error": "want 3 fds"}).encode())
        os._exit(122)
    req = json.loads(msg)
    os.write(report, b"R\n")
    _child(req, fds, sockfd, report)


def serve(sockfd):
    import gc
    import json
    import select
    import socket
    _set_dumpable(False)
    for m in ("numpy", "pandas", "scipy", "scipy.stats", "sklearn", "sklearn.linear_model",
              "sklearn.model_selection", "sklearn.metrics", "statsmodels.api", "json", "csv",
              "re", "math", "datetime", "collections", "sqlite3", "resource", "signal", "traceback"):
        try:
            __import__(m)
        except Exception:
            pass
    _warm()
    gc.collect()
    gc.freeze()
    sock = socket.socket(fileno=sockfd)
    first = True
    while True:
        r, w = os.pipe()  # close-on-exec on both ends
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                _standby(sock, sockfd, w, first)
            finally:
                os._exit(120)
        os.close(w)
        first = False
        pidfd = os.pidfd_open(pid)
        buf = b""
        status = None  # wait status or None while the child runs
        report = None  # (code, maxrss) when the child reported itself
        served = False
        while report is None and status is None:
            ready, _, _ = select.select([r, pidfd], [], [])
            if r in ready:
                b = os.read(r, 256)
                buf += b
                if buf.startswith(b"R\n"):
                    served = True
                    buf = buf[2:]
                if buf.startswith(b"X") and buf.endswith(b"\n"):
                    try:
                        c, rss = buf[1:].split()
                        report = (int(c), int(rss))
                    except ValueError:
                        pass
                if not b and report is None:
                    _, status, ru = os.wait4(pid, 0)
            elif pidfd in ready:
                _, status, ru = os.wait4(pid, 0)
        os.close(r)
        if report is None and not served:
            os.close(pidfd)
            if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 121:
                break
            continue  # the standby child died without a request (or sent an error)
        # Nothing the run started may outlive it (the child itself
        # included). One kill(-1) reaches every process (it is atomic with
        # respect to fork), so the answer can go out at once; the loop
        # below then waits until they are all gone before the next standby
        # child is forked.
        try:
            os.kill(-1, 9)
        except OSError:
            pass
        if report is not None:
            reply = {"status": (report[0] & 0xFF) << 8, "maxrss": report[1]}
        else:
            reply = {"status": status, "maxrss": ru.ru_maxrss * 1024}
        sock.send(json.dumps(reply).encode())
        _killall_others()  # also reaps the child
        os.close(pidfd)
    os._exit(0)


def _set_limits(lim):
    import resource
    base = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                base = int(line.split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (lim["cpu"], lim["cpu"] + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim["fsize"], lim["fsize"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (lim["nofile"], lim["nofile"]))
    if lim.get("nproc"):
        resource.setrlimit(resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))
    resource.setrlimit(resource.RLIMIT_DATA, (base + lim["data"], base + lim["data"]))


def listen_main(path):
    import signal
    _set_dumpable(False)
    pid = os.fork()
    if pid == 0:
        try:
            import socket
            tmp = path + ".new"
            for p in (path, tmp):
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
            ln = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            ln.bind(tmp)
            # The directory keeps everyone but the worker out.
            os.chmod(tmp, 0o666)
            ln.listen(1)
            # PATH appears only once it accepts: the worker dials when it does.
            os.rename(tmp, path)
            conn, _ = ln.accept()
            ln.close()
            os.unlink(path)
            serve(conn.detach())
        except BaseException:
            import traceback
            traceback.print_exc()  # the container's log: the worker reports its tail
        finally:
            os._exit(1)
    # Blocked only here: the server, and so every run, keeps the default mask.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    while True:
        try:
            while True:
                p, _ = os.waitpid(-1, os.WNOHANG)
                if p == 0:
                    break
                if p == pid:
                    # No server, no container: the worker starts it again.
                    os._exit(1)
        except ChildProcessError:
            os._exit(1)
        signal.sigtimedwait({signal.SIGCHLD}, 60)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    elif sys.argv[1] == "listen":
        listen_main(sys.argv[2])
    else:
        with open(sys.argv[2], encoding="utf-8", errors="replace") as f:
            src = f.read()
        run_code(sys.argv[2], src)
