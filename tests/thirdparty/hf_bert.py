"""Hugging Face BERT at a tiny size (random weights, nothing downloaded): keyword inputs, a ModelOutput dataclass
as the output, and the loss computed inside the model from `labels`.

    tcperf advise tests/thirdparty/hf_bert.py:factory --mode train --device cpu
    tcperf advise tests/thirdparty/hf_bert.py:factory_infer --device cpu
"""
import torch
from transformers import BertConfig, BertForSequenceClassification

BATCH, SEQ = 4, 16
CONFIG = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
              max_position_embeddings=64, num_labels=3)


def _model_and_inputs(with_labels: bool):
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**CONFIG))
    input_ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ))
    attention_mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    attention_mask[:, SEQ - 4:] = 0                       # some padding, so the mask matters
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if with_labels:
        inputs["labels"] = torch.randint(0, CONFIG["num_labels"], (BATCH,))
    return model, inputs


def factory():
    """Training: the model's own cross-entropy (`out.loss`) is the loss."""
    model, inputs = _model_and_inputs(with_labels=True)
    return {"model": model, "inputs": inputs, "loss_fn": lambda out: out.loss}


def factory_infer():
    """Inference: no labels, no loss; the logits are compared."""
    model, inputs = _model_and_inputs(with_labels=False)
    return {"model": model, "inputs": inputs}
