"""Hugging Face tokenizers as the reference for Loom's byte-level BPE.

  encode TOKENIZER_JSON TEXT OUT      ids of the file (no special-token post-processing), space-separated
  train gpt2|llama3 TEXT VOCAB OUT    a tokenizer.json trained by the library: GPT-2's ByteLevel split, or
                                      Llama 3's regex Split then ByteLevel, with ignore_merges
  bench TOKENIZER_JSON TEXT           MB/s, the faster of one encode of the whole file and encode_batch over its
                                      lines (the library's fast path); the caller sets the threads
"""
import sys
import time

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def read(path):
    with open(path, encoding="utf-8", newline="") as f:  # "\r\n" stays as it is
        return f.read()


def train(kind, text_path, vocab, out):
    if kind == "gpt2":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=int(vocab), special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train([text_path], trainer)
    tok.save(out)


def main():
    cmd = sys.argv[1]
    if cmd == "encode":
        ids = Tokenizer.from_file(sys.argv[2]).encode(read(sys.argv[3]), add_special_tokens=False).ids
        with open(sys.argv[4], "w") as f:
            f.write(" ".join(map(str, ids)) + "\n")
    elif cmd == "train":
        train(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    elif cmd == "bench":
        tok, text = Tokenizer.from_file(sys.argv[2]), read(sys.argv[3])
        lines = text.splitlines(keepends=True)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            tok.encode(text, add_special_tokens=False)
            t1 = time.perf_counter()
            tok.encode_batch(lines, add_special_tokens=False)
            best = min(best, t1 - t0, time.perf_counter() - t1)
        print("%.2f" % (len(text.encode("utf-8")) / best / 1e6))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
