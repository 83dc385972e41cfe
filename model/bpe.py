"""A byte-level BPE encoder for a GGUF vocabulary with the llama-bpe pre-tokenizer.

Written for model/train_small.py: it must give exactly the token ids
`kvevict tokenize` gives for the vocabulary kvevict's own trainer
(`kvevict random-model --tokenizer-text ...`) learned. The rules, as
kvevict's vocab_bpe.cpp and llama.cpp's llm_tokenizer_bpe apply them:

  * text is split into pieces by the Llama-3 expression (below); stretches
    no expression matches are pieces too;
  * a piece that is itself a token is that token (llama-bpe ignores merges);
  * otherwise its bytes start as the 256 byte tokens (GPT-2's
    bytes_to_unicode spelling) and merge by rank, lowest first, equal ranks
    leftmost first; a pair listed twice keeps its first rank.

Needs the `regex` module (Debian's python3-regex) for \\p{L} and \\p{N}.
"""
import regex

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def bytes_to_unicode():
    """GPT-2's byte -> printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


class Encoder:
    CONTROL = 3  # llama.cpp token type

    def __init__(self, tokens, merges, token_types=None, bos=None, eos=None):
        self.tokens = list(tokens)
        self.ids = {}
        for i, t in enumerate(self.tokens):
            self.ids.setdefault(t, i)
        self.types = list(token_types) if token_types is not None else [1] * len(self.tokens)
        self.bos, self.eos = bos, eos
        self.byte_char = bytes_to_unicode()
        self.char_byte = {c: b for b, c in self.byte_char.items()}
        self.byte_token = [self.ids[self.byte_char[b]] for b in range(256)]
        self.rank = {}
        for r, m in enumerate(merges):
            left, right = m.split(" ", 1)
            key = (self.ids[left], self.ids[right])
            if key not in self.rank:
                self.rank[key] = (r, self.ids[left + right])
        self.pattern = regex.compile(LLAMA3)
        self.cache = {}
        self.token_bytes = [self._spelled_bytes(t) for t in self.tokens]

    @classmethod
    def from_gguf_metadata(cls, md):
        return cls(md["tokenizer.ggml.tokens"], md["tokenizer.ggml.merges"],
                   md.get("tokenizer.ggml.token_type"), md.get("tokenizer.ggml.bos_token_id"),
                   md.get("tokenizer.ggml.eos_token_id"))

    def _spelled_bytes(self, spelling):
        if all(c in self.char_byte for c in spelling):
            return bytes(self.char_byte[c] for c in spelling)
        return b""  # a special or unused token stands for no bytes

    def split(self, text):
        """The pieces of `text` (bytes), unmatched stretches included."""
        s = text.decode("utf-8", errors="surrogateescape")
        out, gap = [], 0
        for m in self.pattern.finditer(s):
            if m.start() > gap:
                out.append(s[gap:m.start()])
            out.append(m.group())
            gap = m.end()
        if gap < len(s):
            out.append(s[gap:])
        return [p.encode("utf-8", errors="surrogateescape") for p in out]

    def encode_piece(self, piece):
        got = self.cache.get(piece)
        if got is not None:
            return got
        if len(piece) > 1:
            whole = self.ids.get("".join(self.byte_char[b] for b in piece))
            if whole is not None and self.types[whole] != self.CONTROL:
                self.cache[piece] = (whole,)
                return (whole,)
        sym = [self.byte_token[b] for b in piece]
        rank = self.rank
        while len(sym) > 1:
            best, at = None, -1
            for i in range(len(sym) - 1):
                r = rank.get((sym[i], sym[i + 1]))
                if r is not None and (best is None or r[0] < best[0]):
                    best, at = r, i
            if best is None:
                break
            sym[at:at + 2] = [best[1]]
        got = tuple(sym)
        self.cache[piece] = got
        return got

    def encode(self, text, bos=False):
        out = [self.bos] if bos else []
        s = text.decode("utf-8", errors="surrogateescape")
        enc = self.encode_piece
        gap = 0
        for m in self.pattern.finditer(s):
            if m.start() > gap:
                out.extend(enc(s[gap:m.start()].encode("utf-8", errors="surrogateescape")))
            out.extend(enc(m.group().encode("utf-8", errors="surrogateescape")))
            gap = m.end()
        if gap < len(s):
            out.extend(enc(s[gap:].encode("utf-8", errors="surrogateescape")))
        return out

    def decode(self, ids):
        return b"".join(self.token_bytes[i] for i in ids)
