"""Logs every call of vLLM's ngram proposer inside `vllm serve`: per request in the batch, the
context it searched, the tokens sampled that step and the draft it proposed, one JSON line
each to $VLLM_NGRAM_LOG. On PYTHONPATH it wraps `NgramProposer.propose` as its module loads
(importing vLLM any earlier breaks its engine start). Used by check.py."""

import importlib.abc
import importlib.machinery
import json
import os
import sys

MODULE = "vllm.v1.spec_decode.ngram_proposer"


def logged(propose):
    def wrapper(self, k, sampled, num_tokens_no_spec, token_ids_cpu, slot_mappings=None):
        drafts = propose(self, k, sampled, num_tokens_no_spec, token_ids_cpu, slot_mappings)
        if len(sampled) < 1024:  # not the start-up call that compiles the lookup
            with open(os.environ["VLLM_NGRAM_LOG"], "a") as log:
                for i, tokens in enumerate(sampled):
                    context = token_ids_cpu[i, : int(num_tokens_no_spec[i])].tolist()
                    step = {"context": context, "sampled": list(map(int, tokens))}
                    log.write(json.dumps({**step, "draft": list(map(int, drafts[i]))}) + "\n")
        return drafts

    return wrapper


class Wrap(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            module.NgramProposer.propose = logged(module.NgramProposer.propose)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("VLLM_NGRAM_LOG"):
    sys.meta_path.insert(0, Wrap())
