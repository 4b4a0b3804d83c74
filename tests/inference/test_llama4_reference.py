"""Llama 4's chunked mask, NoPE temperature and layer pattern against HF transformers' code, ported here.

Sources (github.com/huggingface/transformers), not in the package:
- ``src/transformers/masking_utils.py`` at commit 2ccc6cae21faaf11631efa5fb9054687ae5dc931:
  ``and_masks``, ``causal_mask_function``, ``chunked_overlay`` (with its left padding) and the
  index broadcasting ``sdpa_mask`` uses to evaluate a mask function over (batch, head, q, kv);
- ``src/transformers/models/llama4/modeling_llama4.py`` (the stored version at commit
  63210d0e3b74c2119b7998ff65bc6a2729283626): ``Llama4TextAttention.forward``'s
  ``attn_temperature_tuning`` block;
- ``src/transformers/models/llama4/configuration_llama4.py`` (the stored version at commit
  b17cfe48c5a9631dcf9f57f3865a055903800f81): ``Llama4TextConfig``'s default ``no_rope_layers``
  (1 = RoPE), and ``layer_types`` ("chunked_attention" where RoPE is used, else "full_attention"), which
  ``Llama4TextModel.forward`` (same modeling file) maps to ``create_chunked_causal_mask`` and
  ``create_causal_mask``. (In that modeling file a NoPE layer also skips QK-norm: ``use_qk_norm and
  use_rope``.)
"""

import pytest
import torch

from mha_course.inference.chunked_attention import chunked_causal_mask
from mha_course.inference.nope_layers import apply_nope_temperature, rope_layers
from mha_course.testing import assert_close

# ---- masking_utils.py ---------------------------------------------------------------------------


def and_masks(*mask_functions):
    def and_mask(batch_idx, head_idx, q_idx, kv_idx):
        result = q_idx.new_ones((), dtype=torch.bool)
        for mask in mask_functions:
            result = result & mask(batch_idx, head_idx, q_idx, kv_idx).to(result.device)
        return result

    return and_mask


def causal_mask_function(batch_idx, head_idx, q_idx, kv_idx):
    return kv_idx <= q_idx


def chunked_overlay(chunk_size, left_padding):
    def inner_mask(batch_idx, head_idx, q_idx, kv_idx):
        return (kv_idx - left_padding[batch_idx]) // chunk_size == (q_idx - left_padding[batch_idx]) // chunk_size

    return inner_mask


def hf_chunked_mask(batch_size, cache_position, kv_length, chunk_size, left_padding):
    mask_function = and_masks(chunked_overlay(chunk_size, left_padding), causal_mask_function)
    batch_arange = torch.arange(batch_size)[:, None, None, None]
    head_arange = torch.arange(1)[None, :, None, None]
    kv_arange = torch.arange(kv_length)[None, None, None, :]
    return mask_function(batch_arange, head_arange, cache_position[None, None, :, None], kv_arange)  # (B, 1, T, S)


@pytest.mark.parametrize("T,S,C", [(9, 9, 4), (12, 12, 3), (1, 10, 4), (3, 10, 4), (5, 5, 8)])
def test_chunked_mask_matches_hf(T, S, C):
    theirs = hf_chunked_mask(2, torch.arange(S - T, S), S, C, torch.zeros(2, dtype=torch.long))
    ours = chunked_causal_mask(T, C, S)
    assert torch.equal(theirs, ours.expand(2, 1, T, S))


def test_left_padding_shifts_hfs_chunks_the_course_mask_counts_from_the_first_real_token():
    # HF counts chunks from each sequence's first real token; the course's mask does the same when given
    # the real tokens only: row and column p of the padded mask are position p - pad of the real sequence.
    pad, T, C = 3, 10, 4
    theirs = hf_chunked_mask(1, torch.arange(T), T, C, torch.tensor([pad]))[0, 0]
    assert torch.equal(theirs[pad:, pad:], chunked_causal_mask(T - pad, C))


# ---- modeling_llama4.py: Llama4TextAttention, attn_temperature_tuning ---------------------------


def hf_nope_temperature(query_states, cache_position, floor_scale, attn_scale):
    input_shape = query_states.shape[:2]  # query_states (B, T, H, D) before the transpose
    attn_scales = torch.log(torch.floor((cache_position.float() + 1.0) / floor_scale) + 1.0) * attn_scale + 1.0
    attn_scales = attn_scales.view((1, input_shape[-1], 1, 1)).expand((*input_shape, 1, 1))  # batch size > 1
    return (query_states * attn_scales).to(query_states.dtype)


@pytest.mark.parametrize("floor_scale,attn_scale", [(8192, 0.1), (4, 0.1), (3, 0.5)])  # Llama 4: 8192, 0.1
def test_nope_temperature_matches_hf(floor_scale, attn_scale):
    torch.manual_seed(0)
    positions = torch.tensor([0, 1, 2, 3, 7, 8191, 8192, 20000, 100000])
    q = torch.randn(2, len(positions), 3, 4)  # HF's (B, T, H, D)
    theirs = hf_nope_temperature(q, positions, floor_scale, attn_scale)
    ours = apply_nope_temperature(q.transpose(1, 2), positions, floor_scale, attn_scale).transpose(1, 2)
    assert_close(ours, theirs)


# ---- configuration_llama4.py: Llama4TextConfig ---------------------------------------------------


@pytest.mark.parametrize("num_hidden_layers,no_rope_layer_interval", [(48, 4), (10, 4), (7, 3), (4, 1)])
def test_rope_layers_match_hfs_no_rope_layers(num_hidden_layers, no_rope_layer_interval):
    no_rope_layers = [int((layer_idx + 1) % no_rope_layer_interval != 0) for layer_idx in range(num_hidden_layers)]
    layer_types = ["chunked_attention" if no_rope_layers[i] else "full_attention" for i in range(num_hidden_layers)]
    ours = rope_layers(num_hidden_layers, no_rope_layer_interval)
    assert ours == [bool(u) for u in no_rope_layers]  # use_rope = config.no_rope_layers[layer_idx]
    assert [t == "chunked_attention" for t in layer_types] == ours
