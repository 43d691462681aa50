"""A tiny in-memory policy and reward model (the arith tokenizer, a 2-layer Llama): no files."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_models():
    from transformers import LlamaForSequenceClassification

    from tether.tasks.arith import build_base_model, build_tokenizer
    from tether.tasks.arith.model import build_config

    tok = build_tokenizer()
    policy = build_base_model(tok, seed=0)
    config = build_config(tok)
    config.num_labels = 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        rm = LlamaForSequenceClassification(config).eval()
    return tok, policy, rm


@pytest.fixture(scope="session")
def service(tiny_models):
    from tether.serve.service import ModelService

    tok, policy, rm = tiny_models
    return ModelService(policy, tok, rm, tok, max_batch_size=8)


@pytest.fixture(scope="session")
def policy_only(tiny_models):
    from tether.serve.service import ModelService

    tok, policy, _ = tiny_models
    return ModelService(policy, tok, max_batch_size=8)


@pytest.fixture
def client_for():
    """``client_for(service, **settings)`` -> a started TestClient (closed after the test)."""
    from fastapi.testclient import TestClient

    from tether.serve import ServeSettings, create_app

    clients = []

    def make(service, **settings):
        settings.setdefault("model_name", "tiny")
        client = TestClient(create_app(service, ServeSettings(**settings)))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)
