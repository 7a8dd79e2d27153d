"""Salmon's ARR sampler, offline, for bench/active_embedding.py (run with Salmon's Python 3.8).

Protocol on stdin/stdout, one JSON object per line; lines this script sends start with
"@@ " (anything else on stdout is Salmon's or torch's chatter and is ignored):

- reads the config {"n", "d", "budget", "batch", "checkpoints", "seed", "search_rounds",
  "extra_fits"};
- sends {"ask": [[head, left, right], ...]} and reads {"left_closer": [bool, ...]},
  one batch of ``batch`` questions at a time; after each batch calls
  ``process_answers`` (which refits Salmon's t-STE) and ``get_queries`` (which scores
  the next questions, one top question per head, shuffled — ARR's defaults);
- sends {"embedding": [[...]], "answers": k} at each checkpoint and {"done": true}.

Until ARR has scored queries (its first R·n answers, R=1) questions come from its
``get_query``, which is uniformly random, as in Salmon's server.
"""

import json
import logging
import sys

import numpy as np


def send(message):
    sys.stdout.write("@@ " + json.dumps(message) + "\n")
    sys.stdout.flush()


class StopAfter:
    """Ends ``get_queries``' search after ``rounds`` rounds (2^12 + 2^13 + ... queries), as
    Salmon's server does when new answers arrive; its own cap is ~2 million queries, which
    takes seconds per refit here."""

    def __init__(self, rounds):
        self.left = rounds

    def is_set(self):
        self.left -= 1
        return self.left <= 0


def main():
    logging.disable(logging.CRITICAL)
    config = json.loads(sys.stdin.readline())
    np.random.seed(config["seed"])
    import torch

    torch.manual_seed(config["seed"])
    from salmon.triplets.samplers import ARR

    n, budget, batch = config["n"], config["budget"], config["batch"]
    checkpoints = set(config["checkpoints"])
    sampler = ARR(n=n, d=config["d"], random_state=config["seed"])
    queue = []
    answered = 0
    while answered < budget:
        size = min(batch, budget - answered)
        questions = []
        while len(questions) < size:
            if not queue:
                query, _ = sampler.get_query()
                if query is not None:
                    questions.append([query["head"], query["left"], query["right"]])
                    continue
                posted, _, _ = sampler.get_queries(stop=StopAfter(config["search_rounds"]))
                queue = [list(map(int, q)) for q in posted]
            questions.append(queue.pop(0))
        send({"ask": questions})
        reply = json.loads(sys.stdin.readline())
        answers = []
        for (head, left, right), left_closer in zip(questions, reply["left_closer"]):  # noqa: B905 (Python 3.8)
            winner = left if left_closer else right
            answers.append({"head": head, "left": left, "right": right, "winner": winner})
        sampler.process_answers(answers)
        for _ in range(config.get("extra_fits", 0)):
            # Salmon's server keeps calling process_answers while no answers arrive (it
            # refits on every call, and returns after 20 empty ones): more training per
            # batch than one call. ``extra_fits`` empty calls stand in for that loop.
            sampler.process_answers([])
        queue = []  # Salmon clears its queries after every update (process_answers -> True)
        answered += len(questions)
        if answered in checkpoints:
            send({"embedding": sampler.get_model()["embedding"], "answers": answered})
    send({"done": True})


if __name__ == "__main__":
    main()
