"""The SSE body of a streamed completion, read into a request's result (``mode =
"serve"``, issue 41; :mod:`openai_load` sends the requests). Parsed by event: comments
(``: ping``) skipped, ``data:`` lines joined until the blank line, each content chunk's
arrival stored; a role-only first chunk and a usage-only last chunk are not tokens. What
is not such a stream (a malformed line, an answer in one piece, a cut) is the request's
error, its bytes quoted escaped.
"""

import json
import time

MAX_ERROR_TEXT = 300
"""Characters of a response body or a malformed line quoted in a request's error."""


def escaped(raw):
    """Bytes or text as printable ASCII (``\\x1b``, ``\\n``), cut to MAX_ERROR_TEXT."""
    if isinstance(raw, bytes):
        text = repr(raw[:MAX_ERROR_TEXT])[2:-1]
    else:
        text = repr(raw[:MAX_ERROR_TEXT])[1:-1]
    return text + ("..." if len(raw) > MAX_ERROR_TEXT else "")


def _content(obj, api):
    """(the text a streamed chunk carries, '' for a role-only or usage-only chunk; its
    finish reason; whether it is a chunk of a token without text: its text field there
    and empty, as vLLM 0.32 streams an EOS that ``ignore_eos`` let through, or a special
    token, one chunk per token; a chat delta naming the role is the opening, not one)."""
    choices = obj.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return "", None, False
    c = choices[0]
    finish = c.get("finish_reason")
    if api == "chat":
        delta = c.get("delta") or {}
        text = delta.get("content") if isinstance(delta, dict) else None
        textless = text == "" and "role" not in delta
    else:
        text = c.get("text")
        textless = text == ""
    return (text if isinstance(text, str) else ""), finish, textless


async def read_stream(resp, res, api, t_send):
    """Consume the SSE body into ``res``; returns normally at ``[DONE]`` or EOF."""
    data = []
    done = False

    def dispatch(now):
        nonlocal done
        raw = "\n".join(data)
        del data[:]
        if raw.strip() == "[DONE]":
            done = True
            return
        try:
            obj = json.loads(raw)
        except ValueError:
            res.error = "malformed SSE data: '%s'" % escaped(raw)
            return
        if not isinstance(obj, dict):
            res.error = "malformed SSE data (not an object): '%s'" % escaped(raw)
            return
        if obj.get("error") is not None:
            res.error = "server error in the stream: %s" % escaped(json.dumps(obj["error"]))
            return
        if isinstance(obj.get("usage"), dict):
            res.usage = obj["usage"]
        text, finish, textless = _content(obj, api)
        if text:
            res.chunk_s.append(now - t_send)
            res.chunk_text.append(text)
        elif textless:
            res.textless_s.append(now - t_send)
        if finish:
            res.finished = True

    async for line in resp.content:
        now = time.monotonic()
        if res.first_byte_s is None:
            res.first_byte_s = now - t_send
        line = line.rstrip(b"\r\n")
        if not line:
            if data:
                dispatch(now)
        elif line.startswith(b":"):
            continue  # an SSE comment (a keep-alive)
        elif line.startswith(b"data:"):
            try:  # one space after the colon is the field's separator (SSE)
                data.append(line[6:].decode("utf-8") if line[5:6] == b" "
                            else line[5:].decode("utf-8"))
            except UnicodeDecodeError:
                res.error = "malformed SSE line (not UTF-8): '%s'" % escaped(line)
        elif not line.startswith((b"event:", b"id:", b"retry:")):
            res.error = "malformed SSE line: '%s'" % escaped(line)
            if resp.content_type == "application/json":  # one answer, not a stream
                res.error = "not a stream: the server answered %s in one piece (it did " \
                    "not honour stream: true; dltop times streamed tokens): '%s'" % (
                        resp.content_type, escaped(line))
        if res.error or done:
            return
    if data:
        dispatch(time.monotonic())
    if not done and not res.finished and not res.error:
        res.error = "stream ended before [DONE] (cut)"
