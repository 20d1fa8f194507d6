"""sequence_logprobs: one padded forward pass equals scoring each sequence alone."""

import pytest
import torch

from workbench.algorithms import pack_sequences, sequence_logprobs
from f32 import assert_f32_close

PROMPTS = [[1, 5, 6, 7], [1, 8], [1, 9, 10]]
RESPONSES = [[11, 12, 2], [13, 14, 15, 16], [17]]


def _batch():
    t = max(map(len, RESPONSES))
    tokens = torch.zeros(len(RESPONSES), t, dtype=torch.long)
    for i, r in enumerate(RESPONSES):
        tokens[i, : len(r)] = torch.tensor(r)
    lengths = torch.tensor([len(r) for r in RESPONSES])
    return pack_sequences(PROMPTS, tokens, lengths, pad_token_id=0)


def test_pack_layout():
    b = _batch()
    assert b.response_start == 4
    assert b.input_ids[1].tolist() == [0, 0, 1, 8, 13, 14, 15, 16]
    assert b.attention_mask[2].tolist() == [0, 1, 1, 1, 1, 0, 0, 0]
    assert b.response_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_matches_unpadded_forward(tiny_model, temperature):
    b = _batch()
    with torch.no_grad():
        lp, ent = sequence_logprobs(tiny_model, b.input_ids, b.attention_mask, b.response_start,
                                    response_mask=b.response_mask, temperature=temperature, with_entropy=True)
        for i, (p, r) in enumerate(zip(PROMPTS, RESPONSES)):
            ids = torch.tensor([p + r])
            logits = tiny_model(ids).logits[0, len(p) - 1 : -1].float() / temperature
            logsm = torch.log_softmax(logits, -1)
            want = logsm.gather(-1, torch.tensor(r).unsqueeze(-1)).squeeze(-1)
            want_ent = -(logsm.exp() * logsm).sum(-1)
            # padded batch vs one unpadded sequence: other shapes, other summation orders
            assert_f32_close(lp[i, : len(r)], want, terms=512)
            assert_f32_close(ent[i, : len(r)], want_ent, terms=512)
            assert (lp[i, len(r):] == 0).all() and (ent[i, len(r):] == 0).all()


def test_gradients_flow(tiny_model):
    b = _batch()
    lp, ent = sequence_logprobs(tiny_model, b.input_ids, b.attention_mask, b.response_start)
    assert ent is None
    (lp * b.response_mask).sum().backward()
    grads = [p.grad for p in tiny_model.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    tiny_model.zero_grad(set_to_none=True)


def test_bad_response_start(tiny_model):
    b = _batch()
    with pytest.raises(ValueError, match="response_start"):
        sequence_logprobs(tiny_model, b.input_ids, b.attention_mask, b.input_ids.shape[1])


# -- grouped_logprobs: each distinct prompt scored once, its key/value cache shared by its responses --

G_PROMPTS = [[1, 5, 6, 7], [1, 8], [1, 5, 6, 7], [1, 9, 10], [1, 8], [1, 5, 6, 7]]
G_RESPONSES = [[11, 12, 2], [13, 14, 15, 16], [17], [3, 4], [13, 2], [12, 12, 12, 12]]


def _grouped():
    from workbench.algorithms import group_sequences

    t = max(map(len, G_RESPONSES))
    tokens = torch.full((len(G_RESPONSES), t), 7, dtype=torch.long)  # junk past each end: must be ignored
    for i, r in enumerate(G_RESPONSES):
        tokens[i, : len(r)] = torch.tensor(r)
    lengths = torch.tensor([len(r) for r in G_RESPONSES])
    return group_sequences(G_PROMPTS, tokens, lengths, pad_token_id=0), pack_sequences(
        G_PROMPTS, tokens, lengths, pad_token_id=0)


def test_group_layout():
    g, _ = _grouped()
    assert g.prompt_ids.shape == (3, 4) and g.shared
    assert g.index.tolist() == [0, 1, 0, 2, 1, 0]
    assert g.prompt_ids[1].tolist() == [0, 0, 1, 8] and g.prompt_mask[2].tolist() == [0, 1, 1, 1]
    assert g.tokens[2].tolist() == [17, 0, 0, 0]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_grouped_equals_packed(tiny_model, temperature):
    """Same log-probabilities, entropies and gradients as the packed pass (float rounding apart)."""
    from workbench.algorithms import grouped_logprobs
    from workbench.algorithms.logprobs import _accepts_cache

    assert _accepts_cache(tiny_model)  # the shared-cache path, not the fallback, is under test
    g, b = _grouped()
    want, want_ent = sequence_logprobs(tiny_model, b.input_ids, b.attention_mask, b.response_start,
                                       response_mask=b.response_mask, temperature=temperature, with_entropy=True)
    (want * torch.arange(1.0, 5.0)).sum().backward()
    want_grads = [p.grad.clone() for p in tiny_model.parameters()]
    tiny_model.zero_grad(set_to_none=True)
    got, got_ent = grouped_logprobs(tiny_model, g, pad_token_id=0, temperature=temperature, with_entropy=True)
    (got * torch.arange(1.0, 5.0)).sum().backward()
    assert_f32_close(got, want, terms=512)
    assert_f32_close(got_ent, want_ent, terms=512)
    for p, w in zip(tiny_model.parameters(), want_grads):  # gradients sum over every token too
        assert_f32_close(p.grad, w, terms=512 * int(b.attention_mask.numel()), scale=max(float(w.abs().max()), 1e-12))
    tiny_model.zero_grad(set_to_none=True)


def test_grouped_without_repeats_is_the_packed_pass(tiny_model):
    from workbench.algorithms import group_sequences, grouped_logprobs

    tokens = torch.tensor([[11, 12, 2, 0], [13, 14, 15, 16], [17, 0, 0, 0]])
    lengths = torch.tensor([3, 4, 1])
    g = group_sequences(PROMPTS, tokens, lengths, pad_token_id=0)
    assert not g.shared
    b = g.packed(0)
    with torch.no_grad():
        want, _ = sequence_logprobs(tiny_model, b.input_ids, b.attention_mask, b.response_start,
                                    response_mask=b.response_mask)
        got, _ = grouped_logprobs(tiny_model, g, pad_token_id=0)
    assert torch.equal(got, want)
