r"""The one result of every outlier-dimension measure (:mod:`isotropy.measures.outliers`,
:mod:`isotropy.measures.layernorm_outliers`): :class:`Outliers`, the dimensions found, most
outlying first, with the statistic that ranks them.

| measure | `dims` | `scores` (`score`) |
|---|---|---|
| `variance_outliers` | Var(xⱼ) ≥ 5 × the mean variance | variance (`"variance"`) |
| `top_variance_dimensions` | the `k` of largest variance | variance (`"variance"`) |
| `activation_outliers` | mⱼ − mean(m) > 3 std(m) | mean \|xⱼ\| (`"mean_abs"`) |
| `rogue_dimensions` | the `k` of largest CCⱼ | CCⱼ / ΣCC (`"share"`) |
| `massive_activations` | those holding one at least | how many each holds (`"massive_count"`) |
| `layernorm_outliers` | flagged in ≥ `min_layers` layers | how many layers (`"layers_flagged"`) |

``count`` is the number of dimensions found (for ``massive_activations``, of dimensions that
hold one, not of activations: ``int(scores.sum())`` counts those); :meth:`Outliers.per_dimension`
spreads the scores over all ``space_dim`` dimensions (zero elsewhere).

Before this result, the measures returned a bare tensor of indices (``variance_outliers``,
``activation_outliers``, ``top_variance_dimensions``, ``layernorm_outliers``), a tuple
``(dims, shares)`` (``rogue_dimensions``) or per-dimension counts of shape ``(dim,)``
(``massive_activations``). Code written for those keeps working: an :class:`Outliers` used
as the old value (indexed, iterated, unpacked, taken ``len`` of, compared, given to a torch
function, asked for a tensor's attribute such as ``.tolist()``) is that old value, with a
``FutureWarning`` that names the attribute to use instead. That use will be refused in a
later release. What changed with no such path: an :class:`Outliers` is no ``torch.Tensor``
(``isinstance`` says so), cannot be hashed, and ``==`` between two of them is one ``bool``
(the same dimensions, scores and measure).

>>> r = Outliers("variance_outliers", torch.tensor([3, 0]), torch.tensor([9.0, 6.0]),
...              "variance", space_dim=5)
>>> r.dims.tolist(), r.count, r.per_dimension().tolist()
([3, 0], 2, [6.0, 0.0, 0.0, 9.0, 0.0])
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

__all__ = ["Outliers"]

# what each measure returned before Outliers: the indices, (indices, scores), or the scores
# spread over every dimension
_OldForm = Literal["dims", "dims_and_scores", "per_dimension"]
_OLD_WHAT = {"dims": ("the int64 tensor of dimension indices", ".dims"),
             "dims_and_scores": ("the tuple (dims, shares)", ".dims and .scores"),
             "per_dimension": ("the per-dimension counts of shape (dim,)",
                               ".dims and .scores, or .per_dimension()")}


_INSIDE = (os.path.abspath(__file__), os.path.dirname(os.path.abspath(torch.__file__)))


def _caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside this module and torch: the line that
    used the result (through an operator, a builtin or a torch function)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_INSIDE):
        frame, level = frame.f_back, level + 1
    return level


def _short(t: torch.Tensor, most: int = 8) -> str:
    values = [round(v, 6) if isinstance(v, float) else v for v in t[:most].tolist()]
    return str(values)[:-1] + (", ...]" if t.numel() > most else "]")


@dataclass(frozen=True, eq=False)
class Outliers:
    """Dimensions an outlier measure singles out (module doc).

    - ``measure``: the function that found them (``"variance_outliers"``, ...).
    - ``dims``: int64 indices, most outlying first (ties: lower index first); empty when none.
    - ``scores``: the ranking statistic of each of ``dims``, same order (``score`` names it).
    - ``space_dim``: the dimension :math:`d` of the space measured.
    """

    measure: str
    dims: torch.Tensor
    scores: torch.Tensor
    score: str
    space_dim: int
    was: _OldForm = "dims"

    def __post_init__(self) -> None:
        if self.dims.dtype != torch.int64 or self.dims.ndim != 1:
            raise ValueError(f"dims must be a 1-D int64 tensor, got {self.dims.dtype} of "
                             f"shape {tuple(self.dims.shape)}")
        if self.scores.shape != self.dims.shape:
            raise ValueError(f"scores must have the shape of dims {tuple(self.dims.shape)}, "
                             f"got {tuple(self.scores.shape)}")
        if self.was not in _OLD_WHAT:
            raise ValueError(f"was must be one of {sorted(_OLD_WHAT)}, got {self.was!r}")

    @property
    def count(self) -> int:
        """How many dimensions were found (``dims.numel()``)."""
        return int(self.dims.numel())

    def per_dimension(self) -> torch.Tensor:
        """The scores spread over all ``space_dim`` dimensions, zero where none was found;
        shape ``(space_dim,)``, the dtype of ``scores``.

        >>> Outliers("m", torch.tensor([1]), torch.tensor([4]), "massive_count", 3,
        ...          ).per_dimension().tolist()
        [0, 4, 0]
        """
        out = torch.zeros(self.space_dim, dtype=self.scores.dtype, device=self.scores.device)
        out[self.dims.to(out.device)] = self.scores
        return out

    def __repr__(self) -> str:
        return (f"Outliers(measure={self.measure!r}, dims={_short(self.dims)}, "
                f"scores={_short(self.scores)}, score={self.score!r}, "
                f"space_dim={self.space_dim})")

    # ---------------------------------------------------------- the old return, deprecated

    def _old(self, use: str) -> Any:
        what, instead = _OLD_WHAT[self.was]
        warnings.warn(
            f"{self.measure} returns an Outliers result (.dims, .scores, .count); {use} uses "
            f"it as {what} it returned before, which is deprecated and will be refused in a "
            f"later release: use {instead}", FutureWarning, stacklevel=_caller_stacklevel())
        if self.was == "dims":
            return self.dims
        if self.was == "dims_and_scores":
            return (self.dims, self.scores)
        return self.per_dimension()

    def __getattr__(self, name: str) -> Any:
        # only reached for a name the result does not have: a tensor's (or tuple's) public
        # attribute; private ones (what IPython, copy or pickle probe for) are not forwarded
        if name.startswith("_") or name in ("measure", "dims", "scores", "score",
                                            "space_dim", "was"):
            raise AttributeError(name)
        old = self._old(f".{name}")
        return getattr(old, name)

    def __len__(self) -> int:
        return len(self._old("len()"))

    def __iter__(self) -> Iterator[Any]:
        return iter(self._old("iterating (or unpacking)"))

    def __getitem__(self, key: Any) -> Any:
        return self._old("indexing")[key]

    def __contains__(self, item: object) -> bool:
        return item in self._old("'in'")

    def __bool__(self) -> bool:
        return bool(self._old("bool()"))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        old = self._old("numpy.asarray()")
        if not isinstance(old, torch.Tensor):
            raise TypeError(f"{self.measure}'s result is no array: use .dims and .scores")
        return np.asarray(old.cpu().numpy(), dtype=dtype)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        def unwrap(a: Any) -> Any:
            if isinstance(a, Outliers):
                return a._old(f"torch.{getattr(func, '__name__', 'function')}()")
            if isinstance(a, (list, tuple)):
                return type(a)(unwrap(v) for v in a)
            return a

        return func(*unwrap(tuple(args)), **{k: unwrap(v) for k, v in (kwargs or {}).items()})

    def __eq__(self, other: object) -> Any:
        if isinstance(other, Outliers):  # the same finding: a plain bool, no warning
            return (self.measure, self.score, self.space_dim, self.was) == (
                other.measure, other.score, other.space_dim, other.was) \
                and torch.equal(self.dims.cpu(), other.dims.cpu()) \
                and torch.equal(self.scores.cpu(), other.scores.cpu())
        return self._old("==") == other

    def __ne__(self, other: object) -> Any:
        if isinstance(other, Outliers):
            return not self == other
        return self._old("!=") != other

    __hash__ = None  # type: ignore[assignment]  # equal by value, as a tensor's contents

    def __lt__(self, other: Any) -> Any:
        return self._old("<") < other

    def __le__(self, other: Any) -> Any:
        return self._old("<=") <= other

    def __gt__(self, other: Any) -> Any:
        return self._old(">") > other

    def __ge__(self, other: Any) -> Any:
        return self._old(">=") >= other

    def __add__(self, other: Any) -> Any:
        return self._old("+") + other

    def __radd__(self, other: Any) -> Any:
        return other + self._old("+")

    def __sub__(self, other: Any) -> Any:
        return self._old("-") - other

    def __rsub__(self, other: Any) -> Any:
        return other - self._old("-")

    def __mul__(self, other: Any) -> Any:
        return self._old("*") * other

    def __rmul__(self, other: Any) -> Any:
        return other * self._old("*")

    def __truediv__(self, other: Any) -> Any:
        return self._old("/") / other

    def __rtruediv__(self, other: Any) -> Any:
        return other / self._old("/")

    def __floordiv__(self, other: Any) -> Any:
        return self._old("//") // other

    def __rfloordiv__(self, other: Any) -> Any:
        return other // self._old("//")

    def __pow__(self, other: Any) -> Any:
        return self._old("**") ** other

    def __neg__(self) -> Any:
        return -self._old("unary -")

    def __abs__(self) -> Any:
        return abs(self._old("abs()"))

    def __int__(self) -> int:
        return int(self._old("int()"))

    def __float__(self) -> float:
        return float(self._old("float()"))

    def __index__(self) -> int:
        return self._old("indexing with it").__index__()
