"""Several cases in one fresh interpreter, each in its own forked copy.

A test whose point is a fresh interpreter (a segfault must not end the test
run; a check of what ``import tripletml`` loads) pays an interpreter start and
the imports once: :func:`script` imports ``prelude`` once, then runs every
case in a ``fork`` of that interpreter.  A crash or an exception ends only its
own case; each case's output lies between ``BEGIN name`` and ``END name
<exit status>`` (-11: segfault), which :func:`parse` reads back.
"""
from __future__ import annotations

import textwrap

RUNNER = textwrap.dedent("""
    import os as _os, sys as _sys, traceback as _tb

    def run_each(cases, fresh_globals=False):
        for name, code in cases:
            print("BEGIN", name, flush=True)
            pid = _os.fork()
            if pid == 0:
                status = 0
                try:
                    exec(code, {"__name__": "__main__"} if fresh_globals else dict(globals()))
                except BaseException:
                    _tb.print_exc(file=_sys.stdout)
                    status = 1
                finally:
                    _sys.stdout.flush()
                    _sys.stderr.flush()
                    _os._exit(status)
            print("END", name, _os.waitstatus_to_exitcode(_os.waitpid(pid, 0)[1]), flush=True)
""")


def script(prelude: str, cases: dict[str, str], *, fresh_globals: bool = False) -> str:
    """The interpreter's code: the runner, ``prelude`` once, then every
    ``{name: code}`` of ``cases`` in its own fork (``fresh_globals``: a case
    sees only ``__name__``, not the prelude's names)."""
    return (RUNNER + textwrap.dedent(prelude)
            + f"\nrun_each({[(n, textwrap.dedent(c)) for n, c in cases.items()]!r}, "
              f"{bool(fresh_globals)})\n")


def parse(stdout: str, names) -> dict[str, tuple[int | None, list[str]]]:
    """``{name: (exit status, lines printed)}`` for every name (status None:
    the case never ended, the interpreter itself died)."""
    out, name = {n: [None, []] for n in names}, None
    for line in stdout.splitlines():
        if line.startswith("BEGIN ") and line[6:] in out:
            name = line[6:]
        elif name is not None and line == f"END {name} {line.rsplit(' ', 1)[-1]}":
            out[name][0], name = int(line.rsplit(" ", 1)[-1]), None
        elif name is not None:
            out[name][1].append(line)
    return {n: (status, lines) for n, (status, lines) in out.items()}
