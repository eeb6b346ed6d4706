"""``torch.multinomial`` compiled in strict mode, tested statistically (kernels draw from Philox,
not torch's generator): every frequency lies within five standard errors of its probability
(fixed seeds, so the tests are deterministic), zero weights are never drawn, draws without
replacement are distinct. Trace-time limits decline with their reason."""

from __future__ import annotations

import pytest
import torch

WEIGHTS = torch.tensor([0.5, 0.0, 1.5, 3.0, 0.0])  # unnormalised; zeros inside and at the end
P = WEIGHTS / WEIGHTS.sum()


def draw(weights, n, replacement):
    torch.compiler.reset()
    fn = lambda w: torch.multinomial(w, n, replacement)  # noqa: E731
    return torch.compile(fn, backend="nkipy", options={"strict": True})(weights)


def assert_frequencies(sample: torch.Tensor, p: torch.Tensor) -> None:
    n = sample.numel()
    freq = torch.bincount(sample.flatten(), minlength=len(p)).double() / n
    se = (p.double() * (1 - p.double()) / n).sqrt()
    assert ((freq - p).abs() <= 5 * se).all(), (freq, p)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_with_replacement_follows_the_weights(dtype):
    torch.manual_seed(0)
    sample = draw(WEIGHTS.to(dtype), 20_000, True)
    assert sample.shape == (20_000,) and sample.dtype == torch.int64
    assert_frequencies(sample, P)


def test_rows_draw_from_their_own_weights():
    torch.manual_seed(1)
    weights = torch.stack([WEIGHTS, WEIGHTS.flip(0), torch.tensor([0, 0, 0, 0, 1e-30])])
    sample = draw(weights, 10_000, True)
    assert_frequencies(sample[0], P)
    assert_frequencies(sample[1], P.flip(0))
    assert (sample[2] == 4).all()


def test_without_replacement_is_sequential_sampling():
    """The first draw follows the weights, the second the weights renormalised without the
    first: ``P(second = j) = sum_i p_i p_j / (1 - p_i)``."""
    torch.manual_seed(2)
    sample = draw(WEIGHTS.expand(20_000, 5).contiguous(), 3, False)
    assert (sample.sort(1).values == torch.tensor([0, 2, 3])).all()
    assert_frequencies(sample[:, 0], P)
    second = torch.stack(
        [sum(P[i] * P[j] / (1 - P[i]) for i in range(5) if i != j) for j in range(5)]
    )
    assert_frequencies(sample[:, 1], second)


def test_reproducible_under_manual_seed():
    torch.manual_seed(3)
    first = draw(WEIGHTS, 50, True)
    torch.manual_seed(3)
    assert torch.equal(draw(WEIGHTS, 50, True), first)


@pytest.mark.parametrize(
    ("weights", "n", "replacement", "reason"),
    [
        (torch.ones(3), 4, False, "of 4 samples from 3 categories without replacement"),
        (torch.ones(64, 1024), 300, True, "multinomial with 19660800 comparisons"),
    ],
)
def test_declines_what_it_cannot_draw(weights, n, replacement, reason):
    """Strict mode raises, naming the rule's reason."""
    with pytest.raises(Exception, match=f"multinomial declined: .*{reason}"):
        draw(weights, n, replacement)
