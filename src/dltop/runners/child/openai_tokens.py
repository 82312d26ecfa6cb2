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

import json
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


def counter(opts, endpoint, model, headers):
    """The counter of a run: its ``tokenizer`` file, else the server's ``/tokenize`` when
    it counts a word with one of :data:`BODIES`, else None (usage, else estimated)."""
    if opts.get("tokenizer"):
        return Local(opts["tokenizer"])
    for body in BODIES:
        remote = Remote(endpoint, model, headers, body=body)
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


def exact_prompt(count, k, rng, words):
    """A prompt of exactly ``k`` tokens by ``count``, of ``words`` drawn with ``rng``.

    Raises:
        ValueError: no prompt of exactly ``k`` tokens after :data:`ATTEMPTS` adjustments.
    """
    out = [rng.choice(words) for _ in range(k)]
    for _ in range(ATTEMPTS):
        c = count(" ".join(out))
        if c == k:
            return " ".join(out)
        if c > k:  # each word is a token at least: dropping c - k never drops too many
            del out[max(1, len(out) - (c - k)):]
        else:
            out.extend(rng.choice(words) for _ in range(k - c))
    raise ValueError("no prompt of exactly %d tokens after %d adjustments" % (k, ATTEMPTS))


def prompts_for(spec, n, rng, dataset_prompts=None, counter=None):
    """``n`` prompts: sampled from the dataset, else synthetic ones of exactly
    ``prompt_tokens`` tokens by ``counter`` (:mod:`openai_tokens`), else of about as many
    words (approximate: no tokenizer is known)."""
    if dataset_prompts:
        return [rng.choice(dataset_prompts) for _ in range(n)]
    k = int(spec["prompt_tokens"])
    if counter is not None:
        words = single_words(counter.count)
        return [exact_prompt(counter.count, k, rng, words) for _ in range(n)]
    words = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
             "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa")
    return [" ".join(rng.choice(words) for _ in range(k)) for _ in range(n)]


def read_dataset(path):
    """Prompts of a JSONL file (one string, or an object with ``prompt``/``text``, per
    line) or a ShareGPT-style JSON (a list of ``conversations``: each one's first human
    turn)."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    out = []
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, list):
        for item in doc:
            turns = item.get("conversations") if isinstance(item, dict) else None
            for turn in turns or ():
                if isinstance(turn, dict) and turn.get("from") in ("human", "user") \
                        and isinstance(turn.get("value"), str):
                    out.append(turn["value"])
                    break
        return out
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        obj = json.loads(line)
        if isinstance(obj, str):
            out.append(obj)
        elif isinstance(obj, dict):
            for key in ("prompt", "text"):
                if isinstance(obj.get(key), str):
                    out.append(obj[key])
                    break
    return out


def new_rng(seed):
    return random.Random(seed)
