"""Noisy answers and the feature-free ordinal embeddings (issue 30): which
loss copes with contradicted triplets?

(a) Zappos, flipped answers.  Zappos asks every question once (no repeated
question, no conflict: :func:`tripletml.datasets.count_answers`), so noise is
planted: the same split as ``bench/bench_zappos.py`` (KFold(5), shuffled,
seed 0; 20,000 training triplets drawn with ``default_rng(fold)`` from the
fold's 80 %), then a fraction ``f`` of the training triplets is flipped
(close and far swapped; rows drawn with ``default_rng(1000 + fold)``), and
the embedding is scored on the fold's *clean* 20 % (triplet accuracy).

(b) Synthetic, repeated answers.  A planted 5-D configuration (``n_items``
standard normal points); ``n_questions`` random questions ``(head, a, b)``,
each answered 3 to 5 times under a logistic noise model,
``P(a closer) = sigmoid((|x_h - x_b|^2 - |x_h - x_a|^2) / scale)``.  The
questions are split 80 / 20; the embeddings are fitted on all the answers to
the training questions and scored on the answers to the held-out questions,
next to the majority-answer ceiling of those answers
(``count_answers(...).majority_ceiling``: no embedding can agree with more),
the planted configuration's own accuracy on them (the Bayes rate) and the
accuracy against the planted order (the noise-free answer).

SOE (squared hinge: unbounded, quadratic in the violation), STE (logistic:
unbounded, linear), TSTE (Student-t likelihood: bounded) at 5-D, the library
defaults otherwise (``n_init=4``, ``random_state=0``).

Run: ``python -m bench.bench_zappos_noise [--folds 5] [--dim 5]`` (needs the
shared data: ``TRIPLETML_DATA`` or ``~/tripletml_data`` with ``zappos/``);
writes ``results/zappos_noise/flips.csv``, ``repeated.csv`` and
``provenance.json`` (git revision, machine, arguments).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import warnings

import numpy as np

FLIPS = (0.0, 0.1, 0.2, 0.3, 0.4)


def _estimators(dim: int):
    from tripletml.embedding import SOE, STE, TSTE
    return {"SOE": SOE(dim, random_state=0), "STE": STE(dim, random_state=0),
            "TSTE": TSTE(dim, random_state=0)}


def flipped(folds: int, dim: int) -> list[dict]:
    """Part (a): held-out clean accuracy after flipping a fraction of the
    training answers."""
    from sklearn.model_selection import KFold

    from tripletml.datasets import count_answers, load_comparisons

    T = load_comparisons("zappos").triplets
    info = count_answers(T)
    print(f"zappos: {info.n_answers} answers to {info.n_questions} questions, "
          f"{info.n_conflicting} conflicting")
    rows = []
    for fold, (tr_i, te_i) in enumerate(KFold(5, shuffle=True, random_state=0).split(T)):
        if fold >= folds:
            break
        rng = np.random.default_rng(fold)
        tr, te = T[rng.choice(tr_i, 20000, replace=False)], T[te_i]
        flip_rng = np.random.default_rng(1000 + fold)
        order = flip_rng.permutation(len(tr))
        for f in FLIPS:
            noisy = tr.copy()
            idx = order[:int(round(f * len(tr)))]          # nested: 10 % within 20 % ...
            noisy[idx, 1], noisy[idx, 2] = tr[idx, 2], tr[idx, 1]
            for name, est in _estimators(dim).items():
                est.fit(noisy)
                rows.append(dict(fold=fold, flip=f, estimator=name,
                                 train_acc=est.score(noisy), test_acc=est.score(te)))
        print(f"fold {fold} done")
    return rows


def synthetic(dim: int, n_items: int, n_questions: int, scales, seed: int = 0) -> list[dict]:
    """Part (b): repeated answers from a planted configuration."""
    from tripletml.datasets import count_answers

    rows = []
    for scale in scales:
        rng = np.random.default_rng(seed)
        P = rng.standard_normal((n_items, dim))
        q = rng.integers(0, n_items, size=(3 * n_questions, 3))
        q = q[(q[:, 0] != q[:, 1]) & (q[:, 0] != q[:, 2]) & (q[:, 1] != q[:, 2])]
        q[:, 1:] = np.sort(q[:, 1:], axis=1)               # one row per question
        q = np.unique(q, axis=0)
        q = q[rng.permutation(len(q))[:n_questions]]
        reps = rng.integers(3, 6, size=len(q))              # 3..5 answers each
        d2 = lambda a, b: ((P[a] - P[b]) ** 2).sum(axis=1)  # noqa: E731
        margin = d2(q[:, 0], q[:, 2]) - d2(q[:, 0], q[:, 1])  # > 0: a (col 1) truly closer
        p_a = 1.0 / (1.0 + np.exp(-margin / scale))
        Q = np.repeat(q, reps, axis=0)
        a_closer = rng.random(len(Q)) < np.repeat(p_a, reps)
        ans = Q.copy()
        ans[~a_closer, 1], ans[~a_closer, 2] = Q[~a_closer, 2], Q[~a_closer, 1]
        truth = q.copy()
        bad = margin < 0
        truth[bad, 1], truth[bad, 2] = q[bad, 2], q[bad, 1]
        is_test = np.zeros(len(q), dtype=bool)
        is_test[rng.permutation(len(q))[:len(q) // 5]] = True
        row_test = np.repeat(is_test, reps)
        train, test = ans[~row_test], ans[row_test]
        c_train = count_answers(train, n_items)
        c_test = count_answers(test, n_items)
        # the planted configuration's own accuracy on the held-out answers
        # (the Bayes rate: answers agreeing with the noise-free order)
        agree = np.repeat(margin >= 0, reps) == a_closer
        planted = float(agree[row_test].mean())
        for name, est in _estimators(dim).items():
            est.set_params(n_items=n_items).fit(train)
            rows.append(dict(scale=scale, estimator=name, n_answers=len(ans),
                             conflicting=c_train.n_conflicting / c_train.n_questions,
                             train_ceiling=c_train.majority_ceiling,
                             train_acc=est.score(train),
                             test_ceiling=c_test.majority_ceiling, planted_acc=planted,
                             test_acc=est.score(test),
                             truth_acc=est.score(truth[is_test])))
    return rows


def _write(rows: list[dict], path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.5f}" if isinstance(v, float) else v) for k, v in r.items()})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=int, default=5, help="zappos folds run (of 5)")
    ap.add_argument("--dim", type=int, default=5)
    ap.add_argument("--n-items", type=int, default=60, help="synthetic items")
    ap.add_argument("--n-questions", type=int, default=5000, help="synthetic questions")
    ap.add_argument("--scales", type=float, nargs="+", default=[0.5, 2.0, 8.0],
                    help="logistic noise scales (synthetic)")
    ap.add_argument("--out", default=os.path.join("results", "zappos_noise"))
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", UserWarning)       # items no training triplet names

    rows = flipped(args.folds, args.dim)
    _write(rows, os.path.join(args.out, "flips.csv"))
    names = ("SOE", "STE", "TSTE")
    print(f"\n(a) zappos, {args.dim}-D, 20,000 training triplets, a fraction flipped; "
          f"clean held-out accuracy, mean +- sd over {args.folds} folds")
    print("flip  " + "  ".join(f"{n:>15s}" for n in names))
    for f in FLIPS:
        cells = []
        for n in names:
            a = np.array([r["test_acc"] for r in rows if r["flip"] == f and r["estimator"] == n])
            cells.append(f"{a.mean():.4f} +- {a.std():.4f}")
        print(f"{f:4.1f}  " + "  ".join(f"{c:>15s}" for c in cells))

    srows = synthetic(args.dim, args.n_items, args.n_questions, args.scales)
    _write(srows, os.path.join(args.out, "repeated.csv"))
    print(f"\n(b) synthetic {args.dim}-D, {args.n_items} items, {args.n_questions} questions "
          "answered 3-5 times (logistic noise); held-out questions' answers")
    print("scale  conflicting  ceiling  planted  estimator  acc    acc/ceiling  truth_acc  "
          "train_acc (train ceiling)")
    for r in srows:
        print(f"{r['scale']:5.2f}  {r['conflicting']:11.3f}  {r['test_ceiling']:.4f}   "
              f"{r['planted_acc']:.4f}  "
              f"{r['estimator']:9s}  {r['test_acc']:.4f} {r['test_acc'] / r['test_ceiling']:11.4f}"
              f"  {r['truth_acc']:9.4f}  {r['train_acc']:.4f} ({r['train_ceiling']:.4f})")
    from bench._provenance import git_revision, machine_info
    with open(os.path.join(args.out, "provenance.json"), "w") as fh:
        json.dump({"git_revision": git_revision(), "machine": machine_info(),
                   "args": vars(args)}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
