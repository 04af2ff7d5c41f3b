"""Solvers, apart from the estimators: each module holds one learner's
problem and solver objects (state, ``step``, ``objective``, ``finish``,
``stop_reason``) with public entry points, so benchmarks and reproductions
drive them without reaching into private attributes.  Import them from
their modules, e.g. ``from tripletml.solvers.comet import COMETSolver``."""
