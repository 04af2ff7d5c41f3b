"""The reproduction runner (``tripletml.reproduce``): where outputs go (a quick
run never overwrites full results) and the provenance every output records."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def fake_reproduction(monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tripletml import reproduce
    from tripletml.reproduce._common import write_table

    def run(out_dir, *, quick=False, seeds=None, data_home=None, verbose=1, only=None):
        rows = [{"dataset": "a", "value": 0.5 if quick else 0.75}]
        write_table(rows, out_dir, "fake", ["dataset", "value"], title="Fake")
        fig, ax = plt.subplots()
        ax.plot([0, 1])
        fig.savefig(out_dir / "fake.png")
        plt.close(fig)
        return rows

    reproduce.available()
    monkeypatch.setitem(reproduce.REPRODUCTIONS, "fake",
                        reproduce.Reproduction("fake", "test", run))
    return reproduce


def test_quick_run_never_overwrites_full_results(fake_reproduction, tmp_path, monkeypatch):
    # issue 13 item 8: `reproduce X --quick` overwrote the committed results/X
    rp = fake_reproduction
    monkeypatch.chdir(tmp_path)
    rp.run("fake", verbose=0)                                 # full run: results/fake
    full = (tmp_path / "results/fake/fake.csv").read_text()
    assert "0.75" in full
    # the CLI today passes results/NAME explicitly: refused, nothing touched
    with pytest.raises(ValueError, match="would overwrite them"):
        rp.run("fake", Path("results/fake"), quick=True, verbose=0)
    assert (tmp_path / "results/fake/fake.csv").read_text() == full
    # by default a quick run goes to results/quick/NAME, ignored by git
    rp.run("fake", quick=True, verbose=0)
    assert "0.5" in (tmp_path / "results/quick/fake/fake.csv").read_text()
    assert (tmp_path / "results/quick/.gitignore").read_text().splitlines()[-1] == "*"
    assert (tmp_path / "results/fake/fake.csv").read_text() == full
    rp.run("fake", quick=True, verbose=0)                     # quick over quick: fine
    rp.run("fake", Path("results/fake"), quick=True, overwrite=True, verbose=0)
    assert "0.5" in (tmp_path / "results/fake/fake.csv").read_text()


def test_every_output_records_its_command(fake_reproduction, tmp_path):
    import hashlib
    import json
    rp = fake_reproduction
    out = tmp_path / "o"
    rp.run("fake", out, quick=True, seeds=3, only=["a"], verbose=0)
    cmd = f"tripletml reproduce fake --out {out} --quick --seeds 3 --only a"
    assert (out / "fake.md").read_text().rstrip().endswith(
        f"Made by `{cmd}` (tripletml {__import__('tripletml').__version__}); see "
        "PROVENANCE.json.")
    png = (out / "fake.png").read_bytes()
    assert b"tEXttripletml-command\x00" + cmd.encode() in png
    import matplotlib.image as mpimg
    assert mpimg.imread(out / "fake.png").ndim == 3        # still a valid PNG (CRC checked)
    prov = json.loads((out / "PROVENANCE.json").read_text())
    assert prov["command"] == cmd and prov["quick"] is True
    assert sorted(prov["files"]) == ["fake.csv", "fake.md", "fake.png"]
    for f, digest in prov["files"].items():
        assert hashlib.sha256((out / f).read_bytes()).hexdigest() == digest
    # the command given by a caller (the CLI) is recorded verbatim
    rp.run("fake", out, quick=True, verbose=0, command="tripletml reproduce fake --quick -x")
    assert "tripletml reproduce fake --quick -x" in (out / "fake.md").read_text()
