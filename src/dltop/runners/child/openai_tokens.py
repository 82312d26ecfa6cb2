"""Tokens counted, not guessed, and the prompts, for the ``openai`` runner (issue 41
item 3).

A request's output tokens come from the first of: the server's ``usage`` (in the
stream; :mod:`openai_load`), the server's ``/tokenize`` (vLLM, SGLang: ``POST {model,
prompt}`` answered ``{tokens|count}``; llama.cpp's llama-server: ``POST {content}``
answered ``{tokens}``), a local ``tokenizer.json`` (the ``tokenizer``
key, read with the ``tokenizers`` package), else the counted chunks, "estimated".
A counter (:class:`Local`, :class:`Remote`) also builds the synthetic prompts of
exactly ``prompt_tokens`` tokens (:func:`exact_prompt`). Special tokens (a BOS) are
never counted: a BOS in every chunk's count halves ITL (vllm #10847). The prompts
come from a ``dataset`` file (:func:`read_dataset`) or are synthetic (:func:`prompts_for`).
"""

import gzip
import hashlib
import json
import math
import random
import urllib.error
import urllib.request

WORDS = ("the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was",
         "on", "be", "at", "by", "this", "from", "or", "an", "are", "not", "but", "all")
"""Short common words, one token each in most vocabularies: a prompt of ``k`` of them
is ``k`` tokens or near it, and :func:`exact_prompt` adjusts the rest."""
ATTEMPTS = 64
"""Adjustments :func:`exact_prompt` tries before it gives up on a tokenizer."""


class Local(object):
    """A ``tokenizer.json`` read with the ``tokenizers`` package."""

    source = "tokenizer"

    def __init__(self, path):
        from tokenizers import Tokenizer  # only where a tokenizer file is given

        self.tokenizer = Tokenizer.from_file(path)

    def count(self, text):
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


def _vllm_body(model, text):
    return {"model": model, "prompt": text, "add_special_tokens": False}


def _llama_cpp_body(model, text):
    return {"content": text, "add_special": False}


def _tgi_body(model, text):
    return {"inputs": text}


BODIES = (_vllm_body, _llama_cpp_body, _tgi_body)
"""``/tokenize`` request bodies, tried in turn by :func:`counter`: vLLM's and SGLang's,
then llama-server's (which answers a body without ``content`` ``{"tokens": []}``), then
TGI's (its router's ``GenerateRequest``: a body without ``inputs`` is a 422)."""


def _text_tokens(doc):
    """TGI's answer, a list of ``{id, text, start, stop}``: the tokens of the text. TGI
    adds the model's special tokens (a BOS), which it cannot be asked not to (its
    ``add_special_tokens`` is not read from a request); they cover no character."""
    return sum(1 for t in doc if isinstance(t, dict) and isinstance(t.get("stop"), int)
               and isinstance(t.get("start"), int) and t["stop"] > t["start"])


class Remote(object):
    """The server's ``/tokenize`` (at the endpoint's root, beside ``/v1``)."""

    source = "tokenize"

    def __init__(self, endpoint, model, headers, timeout_s=10.0, body=_vllm_body):
        root = endpoint[:-3] if endpoint.endswith("/v1") else endpoint
        self.url = root + "/tokenize"
        self.model = model
        self.headers = dict(headers, **{"Content-Type": "application/json"})
        self.timeout_s = timeout_s
        self.body = body

    def count(self, text):
        """The tokens of ``text`` (raises OSError or ValueError when the server cannot say)."""
        body = json.dumps(self.body(self.model, text)).encode()
        req = urllib.request.Request(self.url, data=body, headers=self.headers)
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            doc = json.loads(resp.read().decode("utf-8"))
        if isinstance(doc, list):
            return _text_tokens(doc)
        n = doc.get("count") if isinstance(doc, dict) else None
        if not isinstance(n, int) and isinstance(doc, dict) and isinstance(doc.get("tokens"),
                                                                           list):
            n = len(doc["tokens"])
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError("/tokenize answered no count: %r" % (doc,))
        return n


def counter(opts, endpoint, model, headers, timeout_s=10.0):
    """The counter of a run: its ``tokenizer`` file, else the server's ``/tokenize`` when
    it counts a word with one of :data:`BODIES` within ``timeout_s``, else None (usage,
    else estimated)."""
    if opts.get("tokenizer"):
        return Local(opts["tokenizer"])
    for body in BODIES:
        remote = Remote(endpoint, model, headers, timeout_s=timeout_s, body=body)
        try:
            # no token in a word: the server read none of this body's fields
            if remote.count("hello") > 0:
                return remote
        except (urllib.error.HTTPError, ValueError):  # this body refused: the next
            continue
        except OSError:  # no server to ask
            return None
    return None


def single_words(count):
    """The words of :data:`WORDS` that are one token by ``count`` (all of them when none
    is: :func:`exact_prompt` then adjusts by trial)."""
    return [w for w in WORDS if count(w) == 1] or list(WORDS)


def exact_prompt(count, k, rng, words, head="", head_tokens=0):
    """A prompt of exactly ``k`` tokens by ``count``, of ``words`` drawn with ``rng``;
    with ``head`` (a shared prefix of ``head_tokens`` tokens), that prefix, a space, and
    ``k`` tokens more, the whole counted: a word's tokens may change with the space
    before it.

    Raises:
        ValueError: no prompt of exactly ``k`` tokens after :data:`ATTEMPTS` adjustments.
    """
    out = [rng.choice(words) for _ in range(k)]
    target = head_tokens + k
    for _ in range(ATTEMPTS):
        text = " ".join(([head] if head else []) + out)
        c = count(text)
        if c == target:
            return text
        if c > target:  # each word is a token at least: dropping c - k never drops too many
            del out[max(1, len(out) - (c - target)):]
        else:
            out.extend(rng.choice(words) for _ in range(target - c))
    raise ValueError("no prompt of exactly %d tokens after %d adjustments" % (target,
                                                                             ATTEMPTS))


def spread(length, ratio, n, rng):
    """``n`` lengths drawn uniformly from the integers of ``[floor(length(1-ratio)),
    ceil(length(1+ratio))]``, at least 1 (vLLM 0.32's ``get_sampling_params``, its
    ``--random-range-ratio``); ``[length] * n`` without a ratio (nothing drawn, so a
    run without one sends what it sent before)."""
    if not ratio:
        return [int(length)] * n
    low = max(1, int(math.floor(length * (1.0 - ratio))))
    high = max(low, int(math.ceil(length * (1.0 + ratio))))
    return [rng.randint(low, high) for _ in range(n)]


def longest(length, ratio):
    """The longest length :func:`spread` may draw."""
    return max(1, int(math.ceil(length * (1.0 + ratio)))) if ratio else int(length)


SYNTHETIC_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
                   "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa")
"""The words of a synthetic prompt where no tokenizer is known (about a token each)."""


def prefixes(k, groups, rng, counter, words):
    """``groups`` shared prefixes of exactly ``k`` tokens by ``counter`` (else ``k`` of
    ``words``), drawn first with ``rng`` (:func:`prompts_for`)."""
    return [exact_prompt(counter.count, k, rng, words) if counter is not None
            else " ".join(rng.choice(words) for _ in range(k)) for _ in range(groups)]


def prompts_for(spec, n, rng, dataset_prompts=None, counter=None, sizes=None):
    """``n`` prompts: sampled from the dataset, else synthetic ones: request ``i`` the
    ``i mod prefix_groups``-th shared prefix of exactly ``prefix_tokens`` tokens (none
    without it), then its own part of exactly ``prompt_tokens`` tokens (drawn by
    :func:`spread` with ``prompt_tokens_spread``), counted by ``counter``
    (:mod:`openai_tokens`), else as many words (approximate: no tokenizer is known).
    The prefixes are drawn first, then the lengths, then each request's words.
    ``sizes``, a list, receives each synthetic prompt's length (prefix and its own part:
    tokens by ``counter``, else words); nothing for dataset prompts."""
    if dataset_prompts:
        return [rng.choice(dataset_prompts) for _ in range(n)]
    k = int(spec["prompt_tokens"])
    p = int(spec.get("prefix_tokens") or 0)
    groups = int(spec.get("prefix_groups") or 1) if p else 1
    words = single_words(counter.count) if counter is not None else list(SYNTHETIC_WORDS)
    heads = prefixes(p, groups, rng, counter, words) if p else [""]
    lengths = spread(k, spec.get("prompt_tokens_spread"), n, rng)
    if sizes is not None:
        sizes.extend(p + m for m in lengths)
    if counter is not None:
        return [exact_prompt(counter.count, lengths[i], rng, words, heads[i % groups], p)
                for i in range(n)]
    return [" ".join(([heads[i % groups]] if p else []) +
                     [rng.choice(words) for _ in range(lengths[i])]) for i in range(n)]


def sent_sizes(prompts, sizes, counter):
    """Per request, (its prompt's length as sent, whether exact): the synthetic prompt's
    tokens by the tokenizer, a dataset prompt's by a local tokenizer file, else words (an
    estimate; a ``/tokenize`` call would be HTTP during the load)."""
    exact = counter is not None
    if sizes:
        return [(m, exact) for m in sizes]
    local = counter is not None and counter.source == "tokenizer"
    texts = [p[0] if isinstance(p, tuple) else p for p in prompts]
    return [(counter.count(t), True) if local else (len(str(t).split()), False)
            for t in texts]


COUNTED_BY = {"tokenizer": "the tokenizer file", "tokenize": "the server's /tokenize",
              "words": "words: no tokenizer known"}
"""What counted the prompts ``max_prompt_tokens`` dropped (:func:`within`), as the
runner's log and the run's note say it."""


def within(prompts, limit, counter=None):
    """The dataset prompts of at most ``limit`` tokens (``max_prompt_tokens``), by
    ``counter``, else by words: (the prompts kept, what counted them). A prompt of at
    most ``limit`` UTF-8 bytes is kept uncounted: a token covers at least one byte (no
    special token is counted), so only longer ones cost a count (a ``/tokenize`` call).

    Raises:
        OSError, ValueError: the server's ``/tokenize`` could not count one.
    """
    count = counter.count if counter is not None else (lambda text: len(text.split()))
    seen = {}
    out = []
    for text in prompts:
        if text not in seen:
            seen[text] = len(text.encode("utf-8")) <= limit or count(text) <= limit
        if seen[text]:
            out.append(text)
    return out, counter.source if counter is not None else "words"


EXPECTED = ("expected a JSONL of prompts (per line a string, or an object with prompt, text "
            "or messages) or a JSON list of ShareGPT conversations (conversations: "
            "[{from: human, value}]) or of OpenAI messages (messages: [{role: user, "
            "content}])")
"""What a ``dataset`` file holds, for the messages that refuse one."""


def read_dataset(path):
    """Prompts of a ``dataset`` file: a JSONL (per line a string, or an object with
    ``prompt``, ``text`` or ``messages``) or a JSON list of such objects, ShareGPT
    conversations among them (each one's first human turn). A UTF-8 BOM is skipped and a
    gzip file read through; blank lines and entries without a prompt (an empty
    conversation, one without a human turn) are skipped.

    Raises:
        ValueError: the file is not UTF-8, a line is not JSON, or it holds no prompt
            (the message names the line and what was expected).
    """
    with open(path, "rb") as probe:
        zipped = probe.read(2) == b"\x1f\x8b"
    opener = gzip.open if zipped else open
    out = []
    try:
        with opener(path, "rt", encoding="utf-8-sig") as fh:
            head = fh.read(4096)
            if head.lstrip()[:1] == "[":
                text = head + fh.read()
                try:
                    doc = json.loads(text)
                except ValueError as exc:
                    raise ValueError("not JSON (%s); %s" % (exc, EXPECTED)) from None
                for item in doc:
                    _add(out, item)
            else:
                fh.seek(0)
                for n, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    line = line.rstrip("\r\n")
                    try:
                        item = json.loads(line)
                    except ValueError as exc:
                        raise ValueError("line %d, column %s is not JSON (%s): %r" % (
                            n, getattr(exc, "colno", "?"), getattr(exc, "msg", exc),
                            line[:80])) from None
                    _add(out, item)
    except UnicodeDecodeError as exc:
        raise ValueError("not UTF-8 text (%s)" % exc) from None
    except (OSError, EOFError) as exc:  # a gzip file cut short, or not gzip
        raise ValueError("cannot be read%s: %s" % (" as gzip" if zipped else "",
                                                    exc)) from None
    if not out:
        raise ValueError("no prompt in it: %s" % EXPECTED)
    return out


def _add(out, item):
    # A conversation's prompt is its first human turn: the single-turn request dltop
    # sends, as vLLM's ShareGPT sampling takes it.
    if isinstance(item, dict):
        # ShareGPT's conversations, LMSYS-Chat's conversation, OpenAI's messages
        turns = next((item[k] for k in ("conversations", "conversation", "messages")
                      if isinstance(item.get(k), list)), None)
        if isinstance(turns, list):
            for turn in turns:
                if isinstance(turn, dict) and (turn.get("from") or turn.get("role")) in (
                        "human", "user"):
                    item = _text(turn.get("value", turn.get("content")))
                    break
            else:
                return
        else:
            item = next((item[k] for k in ("prompt", "text") if isinstance(item.get(k), str)),
                        None)
    if isinstance(item, str) and item.strip():
        out.append(item)


def _text(content):
    # OpenAI's content is a string or a list of parts ({"type": "text", "text": ...}).
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return content


POINT_KEYS = ("seed", "repeat", "request_rate", "concurrency", "arrival", "burstiness",
              "iterations", "warmup", "prompt_tokens", "new_tokens", "prefix_tokens",
              "prefix_groups", "prompt_tokens_spread", "new_tokens_spread")
"""What a run's draws are seeded with (``prompt_draw = "point"``, the default): its sweep
point, never its engine (server, endpoint, served model, api, devices), so that engines
get the same prompts and a group's server a fresh set at each point (docs/serving.md)."""


def point(spec):
    """The run's sweep point (:data:`POINT_KEYS`, defaults filled in as the runner reads
    them) as the JSON text its draw seed is hashed from."""
    opts = spec.get("options") or {}
    rate = spec.get("request_rate") or "inf"
    values = {
        "seed": int(spec.get("seed") or 0), "repeat": int(spec.get("repeat") or 0),
        "request_rate": rate if rate == "inf" else float(rate),
        "concurrency": int(spec.get("concurrency") or 1),
        "arrival": opts.get("arrival", "poisson"),
        "burstiness": float(opts.get("burstiness", 1.0)),
        "prefix_tokens": int(spec.get("prefix_tokens") or 0),
        "prefix_groups": int(spec.get("prefix_groups") or 1),
        "prompt_tokens_spread": float(spec.get("prompt_tokens_spread") or 0.0),
        "new_tokens_spread": float(spec.get("new_tokens_spread") or 0.0)}
    for key in ("iterations", "warmup", "prompt_tokens", "new_tokens"):
        values[key] = int(spec.get(key) or 0)
    return json.dumps([values[k] for k in POINT_KEYS], separators=(",", ":"))


def draw_seed(spec):
    """The seed of a run's random draws (prompts, their lengths, arrivals): ``seed`` itself
    with ``prompt_draw = "seed"`` (every point of a sweep the same prompts, as before it
    existed), else the first 8 bytes, big-endian, of the SHA-256 of :func:`point`, less
    the top bit (an SQLite integer: the run's environment stores it)."""
    if (spec.get("options") or {}).get("prompt_draw") == "seed":
        return int(spec.get("seed") or 0)
    digest = hashlib.sha256(point(spec).encode()).digest()
    return int.from_bytes(digest[:8], "big") % 2 ** 63


def new_rng(seed):
    return random.Random(seed)
