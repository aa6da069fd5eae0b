"""Writes a tiny random llama-architecture model in GGUF for llama-server.

    python3 tests/llamacpp/tiny_model.py OUT.gguf

Two layers, embeddings of 64, 4 query heads sharing 2 key/value heads,
context 256, weights in f32 drawn from a fixed seed: the same file every
time (about half a megabyte). Its vocabulary is SentencePiece-style (the
"llama" tokenizer): <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>,
"▁" and the printable ASCII characters, so any prompt tokenizes (by
character, bytes as the fallback). It generates garbage, but only ASCII:
the output rows of every token but "▁" and the printable characters are
zero, so their logits are 0 while the largest of the others is above 0,
and greedy sampling never picks </s> (a request's token limit is what
stops it) nor a byte that is not whole UTF-8.

Needs the `gguf` package (pinned in .ci/run) and numpy.
"""

import sys

import gguf
import numpy as np

SEED = 20240601
N_LAYER = 2
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
N_CTX = 256

# A chat template for `/v1/chat/completions`: one line per message, then
# the assistant's turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def vocabulary():
    """Tokens, scores and types; the index of the first token that may be
    generated."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(gguf.TokenType.BYTE)
    first_text = len(tokens)
    for piece in ["\u2581"] + [chr(c) for c in range(0x21, 0x7F)]:
        tokens.append(piece)
        types.append(gguf.TokenType.NORMAL)
    scores = [0.0] * first_text + [-float(i) for i in range(len(tokens) - first_text)]
    return tokens, scores, types, first_text


def main():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUT.gguf")
    out = sys.argv[1]
    rng = np.random.default_rng(SEED)
    tokens, scores, types, first_text = vocabulary()
    n_vocab = len(tokens)
    head_dim = N_EMBD // N_HEAD
    n_embd_kv = head_dim * N_HEAD_KV

    def weight(rows, cols, std=0.1):
        # numpy's (rows, cols) is ggml's {cols, rows}: `cols` is the input.
        return rng.normal(0.0, std, size=(rows, cols)).astype(np.float32)

    w = gguf.GGUFWriter(out, "llama")
    w.add_name("tokenmeter-tiny-random")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    w.add_tensor("token_embd.weight", weight(n_vocab, N_EMBD, 1.0))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    output = weight(n_vocab, N_EMBD)
    output[:first_text] = 0.0
    w.add_tensor("output.weight", output)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", weight(N_EMBD, N_EMBD))
        w.add_tensor(p + "attn_k.weight", weight(n_embd_kv, N_EMBD))
        w.add_tensor(p + "attn_v.weight", weight(n_embd_kv, N_EMBD))
        w.add_tensor(p + "attn_output.weight", weight(N_EMBD, N_EMBD))
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", weight(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_up.weight", weight(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_down.weight", weight(N_EMBD, N_FF))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
