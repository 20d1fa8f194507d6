"""sequence_logprobs: one padded forward pass equals scoring each sequence alone."""

import pytest
import torch

from workbench.algorithms import pack_sequences, sequence_logprobs

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
            assert torch.allclose(lp[i, : len(r)], want, atol=1e-5)
            assert torch.allclose(ent[i, : len(r)], want_ent, atol=1e-5)
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
