"""Hugging Face tokenizers as the reference for `loom data prepare`.

  corpus FORTUNES_DIR OUT_JSONL MIN_MB SEED   the fortunes as JSONL: one fortune per line ({"id", "text"}),
                                              shuffled with SEED, pass after pass (each reshuffled) until
                                              the file holds MIN_MB megabytes
  sample JSONL OUT_JSONL N SEED               N lines of JSONL chosen with SEED (read once, reservoir)
  check TOKENIZER_JSON JSONL SHARD_DIR        the train shards of a prepare with --val-fraction 0 must be each
                                              document's <|endoftext|> then its ids, as the library encodes them
  bench TOKENIZER_JSON JSONL MB               the library's encode_batch over the first MB of documents: MB/s
"""
import glob
import json
import os
import random
import struct
import sys
import time

from tokenizers import Tokenizer


def fortunes(root):
    docs = []
    for path in sorted(glob.glob(os.path.join(root, "*"))):
        name = os.path.basename(path)
        if not os.path.isfile(path) or name.endswith((".dat", ".u8")) or name in ("art", "ascii-art", "translate-me"):
            continue
        with open(path, encoding="utf-8", newline="") as f:
            docs += [d.strip("\n") for d in f.read().split("\n%\n") if d.strip()]
    return docs


def corpus(root, out, min_mb, seed):
    docs, rng, n, size = fortunes(root), random.Random(int(seed)), 0, 0
    with open(out, "w", encoding="utf-8") as f:
        while size < float(min_mb) * 1e6:
            rng.shuffle(docs)
            lines = []
            for d in docs:
                lines.append(json.dumps({"id": n, "text": d}, ensure_ascii=False) + "\n")
                n += 1
            chunk = "".join(lines)
            f.write(chunk)
            size += len(chunk.encode("utf-8"))


def sample(src, out, n, seed):
    rng, keep = random.Random(int(seed)), []
    with open(src, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if len(keep) < int(n):
                keep.append(line)
            elif (j := rng.randrange(i + 1)) < int(n):
                keep[j] = line
    with open(out, "w", encoding="utf-8") as f:
        f.writelines(keep)


def shard_ids(directory):
    ids = []
    for path in sorted(glob.glob(os.path.join(directory, "train_*.bin"))):
        with open(path, "rb") as f:
            header = struct.unpack("<256i", f.read(1024))
            width = 2 if header[0] == 20240520 else 4
            body = f.read()
            ids += struct.unpack("<%d%s" % (header[2], "H" if width == 2 else "I"), body)
    return ids


def check(tokenizer, jsonl, directory):
    tok = Tokenizer.from_file(tokenizer)
    eot = tok.token_to_id("<|endoftext|>")
    with open(jsonl, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    want = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        want += [eot] + enc.ids
    got = shard_ids(directory)
    if got != want:
        at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        print("differ at token %d of %d (loom %d tokens, tokenizers %d)" % (at, len(want), len(got), len(want)))
        sys.exit(1)
    print("equal: %d documents, %d tokens" % (len(texts), len(want)))


def bench(tokenizer, jsonl, mb):
    tok, texts, size = Tokenizer.from_file(tokenizer), [], 0
    with open(jsonl, encoding="utf-8") as f:
        for line in f:
            texts.append(json.loads(line)["text"])
            size += len(texts[-1].encode("utf-8"))
            if size >= float(mb) * 1e6:
                break
    t0 = time.perf_counter()
    tok.encode_batch(texts, add_special_tokens=False)
    print("%.3f" % (size / (time.perf_counter() - t0) / 1e6))


if __name__ == "__main__":
    {"corpus": corpus, "sample": sample, "check": check, "bench": bench}[sys.argv[1]](*sys.argv[2:])
