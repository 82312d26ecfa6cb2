"""The context length a server states, read once before the load (issue 41;
docs/serving.md, "The server's context").

Asked in turn, with the run's headers (its API key) and TLS as the load's:

- ``GET {endpoint}/models``: vLLM's and SGLang's ``data[i].max_model_len``, llama.cpp
  llama-server's ``data[i].meta.n_ctx`` (a slot's context, which one request may fill);
- ``GET {root}/props``: llama-server's ``default_generation_settings.n_ctx`` (the same
  per-slot figure, for a build whose models list does not carry it);
- ``GET {root}/info``: TGI's ``max_total_tokens`` (prompt and output together; its
  ``max_input_tokens`` is below it by default, so the total binds first).

``transformers serve`` states none: the run goes on as before, its environment saying
``not stated``. A server that answers none of them, or with another shape, is the same:
the load's own errors then tell.

What it is for (:func:`fit`): synthetic prompts whose longest ``prefix_tokens +
prompt_tokens + new_tokens`` (the spreads' upper ends) is over it fail the run before a
request is sent (SGLang answers each 400; vLLM 0.32 and llama-server cut each answer
short, so the run would time shorter answers), and a ``dataset`` run drops the prompts
longer than it leaves beside ``new_tokens`` (:func:`within`, as ``max_prompt_tokens`` drops them; a
``max_prompt_tokens`` above that is capped by it, and the run's note says so).
"""

import json
import sys
import urllib.error
import urllib.request

import dltop_protocol as proto
import openai_load as load
import openai_tokens as tokens

NOT_STATED = "not stated"


class Context(object):
    """What the server stated: ``tokens`` (prompt and output together), and the field and
    route it came from (``source``)."""

    def __init__(self, tokens, source):
        self.tokens = tokens
        self.source = source

    def said(self):
        """``the server's context 2048 (max_model_len, GET /v1/models)``."""
        return "the server's context %d (%s)" % (self.tokens, self.source)

    def prompt_limit(self, new_tokens):
        """The longest prompt a request of ``new_tokens`` fits beside (may be < 1)."""
        return self.tokens - new_tokens


def _positive(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None


def _get(url, headers, timeout_s):
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read().decode("utf-8"))


def _from_models(doc, model):
    """The served model's entry of a ``/v1/models`` answer: the one named ``model``, else
    the only one (llama-server serves one model whatever a request names)."""
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        return None
    cards = [c for c in data if isinstance(c, dict)]
    named = [c for c in cards if c.get("id") == model]
    card = named[0] if named else (cards[0] if len(cards) == 1 else None)
    if card is None:
        return None
    if _positive(card.get("max_model_len")):
        return Context(card["max_model_len"], "max_model_len, GET /v1/models")
    meta = card.get("meta")
    if isinstance(meta, dict) and _positive(meta.get("n_ctx")):
        return Context(meta["n_ctx"], "meta.n_ctx, GET /v1/models")
    return None


def _from_props(doc, model):
    settings = doc.get("default_generation_settings") if isinstance(doc, dict) else None
    if isinstance(settings, dict) and _positive(settings.get("n_ctx")):
        return Context(settings["n_ctx"], "default_generation_settings.n_ctx, GET /props")
    return None


def _from_info(doc, model):
    if isinstance(doc, dict) and _positive(doc.get("max_total_tokens")):
        return Context(doc["max_total_tokens"], "max_total_tokens, GET /info")
    return None


def read(endpoint, model, headers, timeout_s=10.0):
    """The context the server at ``endpoint`` states for ``model``, or None (each route
    waits at most ``timeout_s``; one that fails or answers another shape is passed)."""
    root = endpoint[:-3] if endpoint.endswith("/v1") else endpoint
    for url, parse in ((endpoint + "/models", _from_models), (root + "/props", _from_props),
                       (root + "/info", _from_info)):
        try:
            found = parse(_get(url, headers, timeout_s), model)
        except (urllib.error.HTTPError, ValueError):  # not this server's route: the next
            continue
        except OSError:  # no answer (refused, TLS, a timeout): the load will say why
            return None
        if found is not None:
            return found
    return None


def within(opts, data, counter, limit, over):
    """The dataset's prompts of more than ``limit`` tokens dropped before the load (the
    load event's ``dataset_prompts``, ``dropped_prompts``, what counted them and what they
    were ``over``; the prompts ``kept``); {} without a limit."""
    if not data or not limit:
        return {}
    try:
        kept, by = tokens.within(data, int(limit), counter)
    except (OSError, ValueError) as exc:
        raise proto.Failed("the prompts of dataset %s could not be counted for "
                           "%s (%s): %s" % (opts["dataset"], over, counter.source,
                                            exc)) from None
    said = "%d of %d dataset prompts over %s dropped (counted by %s)" % (
        len(data) - len(kept), len(data), over, tokens.COUNTED_BY[by])
    sys.stdout.write("[dltop] %s\n" % said)
    sys.stdout.flush()
    own = over.startswith("max_prompt_tokens")
    if not kept:
        raise proto.Failed("%s: no prompt left to send; %s or give a dataset of shorter "
                           "prompts" % (said, "raise max_prompt_tokens" if own
                                        else "serve a longer context"))
    out = {"kept": kept, "dataset_prompts": len(data), "dropped_prompts": len(data) - len(
        kept), "prompt_count_by": by}
    if not own:  # the run's note says what the prompts were over
        out["dropped_over"] = over
    return out


def fit(opts, spec, data, context):
    """The prompt limit and what it is (``max_prompt_tokens``, capped by what the server's
    stated context leaves beside the longest ``max_tokens`` a request asks; else that
    alone), or (None, None) for synthetic prompts, which must fit the context whole, the
    longest drawn (a prefix and the spreads' upper ends), else ``setup_failed``, nothing
    sent."""
    new = tokens.longest(int(spec["new_tokens"]), spec.get("new_tokens_spread"))
    said_new = "new_tokens %d%s" % (new, " (its spread's longest)"
                                    if spec.get("new_tokens_spread") else "")
    if not data:
        own = tokens.longest(int(spec["prompt_tokens"]), spec.get("prompt_tokens_spread"))
        prefix = int(spec.get("prefix_tokens") or 0)
        if context and prefix + own + new > context.tokens:
            raise load.SetupFailed("%sprompt_tokens %d%s + %s = %d > %s: lower them, or "
                                   "serve a longer context" % (
                                       "prefix_tokens %d + " % prefix if prefix else "", own,
                                       " (its spread's longest)" if spec.get(
                                           "prompt_tokens_spread") else "", said_new,
                                       prefix + own + new, context.said()))
        return None, None
    room = context.prompt_limit(new) if context else None
    if room is not None and room < 1:
        raise load.SetupFailed("%s leaves no room for a prompt in %s" % (said_new,
                                                                         context.said()))
    if opts.get("max_prompt_tokens"):
        limit = int(opts["max_prompt_tokens"])
        if room is None or limit <= room:
            return limit, "max_prompt_tokens %d" % limit
        # a longer prompt would be refused or cut short by the server: the context binds
        sys.stdout.write("[dltop] max_prompt_tokens %d capped at %d: %s less %s\n" % (
            limit, room, context.said(), said_new))
        return room, "%s less %s (max_prompt_tokens %d capped by it)" % (
            context.said(), said_new, limit)
    if room is None:
        return None, None
    return room, "%s less %s" % (context.said(), said_new)
