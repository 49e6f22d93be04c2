"""Answers given in advance: the tests and the scenario harness script what the model says."""

import json

from memoryapp.backends.base import Answer, Usage


class ScriptedBackend:
    """Answers given in advance (tests and the eval harness): `extract` and `verdicts`."""

    name = "scripted"
    model = "scripted"

    def __init__(self, extract=None, verdicts=None):
        self.extract_answer = {"facts": []} if extract is None else extract
        self.verdict_map = {k.casefold(): v.upper() for k, v in (verdicts or {}).items()}
        self.seen_inputs = []
        self.verdict_requests = []  # (new text, [neighbour texts]) per verdict call

    def extract(self, text):
        self.seen_inputs.append(text)
        raw = self.extract_answer
        if isinstance(raw, Exception):
            raise raw
        return Answer(text=raw if isinstance(raw, str) else json.dumps(raw), model=self.model)

    def verdicts(self, new_text, old_texts):
        self.verdict_requests.append((new_text, list(old_texts)))
        out = []
        for old in old_texts:
            found = "INDEPENDENT"
            for needle, verdict in self.verdict_map.items():
                if needle in old.casefold():
                    found = verdict
                    break
            out.append(found)
        return out, Usage(calls=1)
