#!/usr/bin/env python3
"""Runs a command as a child subreaper, and names and stops whatever it leaves running.

    scripts/reaped.py [--label NAME] [--grace SECONDS] -- COMMAND [ARGS...]

A process the command starts stays this one's descendant however it detaches (a double fork,
setsid, nohup, a new namespace): Linux hands an orphan to its nearest subreaper ancestor rather
than to init (prctl PR_SET_CHILD_SUBREAPER). So when the command has ended, every process left
below this one is the command's own, and no other process is ever looked at: what the user
starts beside it, in the same terminal or session, is not its business.

Exit status: the command's, if it left nothing running; otherwise 1 (the leftovers are listed
on stderr, then sent SIGTERM, and SIGKILL two seconds later).
"""
import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def parse(argv):
    label, grace = "command", 2.0
    while argv and argv[0] != "--":
        opt = argv.pop(0)
        if opt == "--label" and argv:
            label = argv.pop(0)
        elif opt == "--grace" and argv:
            grace = float(argv.pop(0))
        else:
            sys.exit(f"reaped.py: unknown option '{opt}'\n{__doc__}")
    if not argv or len(argv) < 2:
        sys.exit(f"reaped.py: no command after --\n{__doc__}")
    return label, grace, argv[1:]


def proc_table():
    """pid -> (ppid, command line) for every process now alive."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] == "Z":
                continue  # exited, waiting to be reaped: not running
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            table[int(entry)] = (int(fields[1]), args or stat[stat.index("(") + 1:stat.rindex(")")])
        except (OSError, ValueError, IndexError):
            continue  # gone while being read
    return table


def descendants(root):
    table = proc_table()
    children = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append((pid, table[pid][0], table[pid][1]))
        todo.extend(children.get(pid, []))
    return sorted(out)


def reap_all():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main():
    label, grace, command = parse(sys.argv[1:])
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit(f"reaped.py: prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")
    child = os.fork()
    if child == 0:
        # Python ignores SIGPIPE and SIGXFSZ for itself; the command gets the defaults a shell
        # would give it, or `producer | head` would see EPIPE instead of ending.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        try:
            os.execvp(command[0], command)
        except OSError as e:
            print(f"reaped.py: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
        os._exit(127)
    # A terminal's ^C reaches the whole foreground group; a TERM sent to this process alone is
    # passed on while the command runs, so it can clean up, and afterwards only hurries the sweep.
    running = [True]

    def on_term(*_):
        if running[0]:
            try:
                os.kill(child, signal.SIGTERM)
            except OSError:
                pass

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    status = None
    while status is None:  # reaping orphans as they end, so none lingers as a zombie
        try:
            pid, raw = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        if pid == child:
            status = os.waitstatus_to_exitcode(raw)
            running[0] = False
    deadline = time.monotonic() + grace  # what the command stopped last may still be exiting
    while descendants(os.getpid()) and time.monotonic() < deadline:
        reap_all()
        time.sleep(0.1)
    left = descendants(os.getpid())
    if not left:
        return 128 - status if status < 0 else status
    print(f"{label}: processes it started are still running:", file=sys.stderr)
    for pid, ppid, args in left:
        print(f"  {pid:>7} (parent {ppid}) {args}", file=sys.stderr)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, _, _ in descendants(os.getpid()):
            try:
                os.kill(pid, sig)
            except OSError:  # gone already, or not ours to signal: the listing has named it
                pass
        end = time.monotonic() + 2
        while descendants(os.getpid()) and time.monotonic() < end:
            reap_all()
            time.sleep(0.1)
    reap_all()
    return 1


if __name__ == "__main__":
    sys.exit(main())
