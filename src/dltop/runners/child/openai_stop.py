"""When a serve run stops early (issue 41, the audit): a run that cannot pass sends no
more requests (docs/serving.md#a-run-that-cannot-pass-stops-early).

Three rules, judged as each request ends (:meth:`Stop.judge`):

- **Refused key**: the first :data:`AUTH_REFUSALS` requests to end (warm-up included; all
  of them in a shorter run) each answered 401 or 403, or the error budget was spent by
  refusals alone: a setup problem, ``setup_failed`` after those few, never the whole
  load. The message names the variable, never the key.
- **Error budget spent**: more failed measured requests than ``max_error_rate`` allows
  of the planned measured requests: the run cannot pass whatever the others do. The
  load stops: nothing more is sent, and what is in flight is cut (stored with
  :data:`openai_load.CUT`), as its answers cannot change the outcome and a hung server
  would hold each for its whole stall time.
- **A warm-up that never answered**: more failed warm-up requests than
  ``max_error_rate`` of the warm-up, none ok: the warm-up ends there (its in-flight
  requests cut) and the measured requests, which alone decide the run, begin.
"""

AUTH_REFUSALS = 3
"""The refusals (401/403) in a row, from the first request, that make a key refused."""


class Stop(object):
    """A run's stop rules; ``stop(warmup)`` is :attr:`openai_load.Client.stop`."""

    def __init__(self, warmup, measured, max_error_rate, key_env):
        self.warmup, self.measured = warmup, measured
        self.limit = max_error_rate
        self.key_env = key_env
        self.ended = self.refused = 0
        self.warm_failed = self.warm_ok = self.failed = 0
        self.setup = None
        """The setup failure's message (a refused key), once judged."""
        self.spent = False
        """The measured error budget is spent: the load stopped."""

    def __call__(self, warmup):
        if self.setup or self.spent:
            return True
        return warmup and self.warm_failed > self.limit * self.warmup and not self.warm_ok

    def judge(self, res, ok):
        """Count one ended request (``ok``: it counts as a success; a cut one is not
        judged)."""
        self.ended += 1
        if res.status in (401, 403) and self.refused == self.ended - 1:
            self.refused += 1
            if self.refused == min(AUTH_REFUSALS, self.warmup + self.measured):
                self.setup = self._refusal(res.error)
        if res.warmup:
            self.warm_ok += bool(ok)
            self.warm_failed += not ok
        elif not ok:
            self.failed += 1
            self.spent = self.spent or self.failed > self.limit * self.measured
        if self.spent and not self.setup and self.refused == self.ended:
            self.setup = self._refusal(res.error)  # nothing but refusals: the key

    def _refusal(self, error):
        if self.key_env:
            return "the server refused the key from api_key_env %s (%s)" % (self.key_env,
                                                                            error)
        return ("the server asks for an API key (%s): name the environment variable "
                "that holds it with api_key_env" % error)

    def spent_message(self, cut, errors):
        """The run's failure when its budget was spent: counts, and the first errors."""
        sent = self.measured - cut["never_sent"]
        return ("stopped early: %d of %d measured requests failed, more than max_error_rate "
                "%.1f %% of them allows (%d): the run cannot pass; %d sent, %d of them cut in "
                "flight, %d never sent; first errors: %s" % (
                    self.failed, self.measured, 100.0 * self.limit,
                    int(self.limit * self.measured), sent, cut["cut"], cut["never_sent"],
                    "; ".join(errors)))
