"""The models and sizes recipes can build, as plain data.

Kept free of torch so that `python -m recipes.config catalog` and config checks
answer in milliseconds; `recipes.models` turns these entries into modules.
"""

from __future__ import annotations

# Per model: size name -> architecture hyperparameters handed to the builder.
MODEL_SIZES: dict[str, dict[str, dict]] = {
    "gpt-neo": {
        "tiny": dict(hidden_size=64, num_layers=2, num_heads=4, vocab_size=256,
                     max_position_embeddings=256, window_size=64),
        # the recipe protocol's CPU model (recipes/bench/protocol.py): 1.25M parameters, byte tokens
        "small": dict(hidden_size=128, num_layers=6, num_heads=4, vocab_size=256,
                      max_position_embeddings=256, window_size=64),
        # the protocol's GPU model (recipes/bench/gpu.sh): 25.3M parameters, byte tokens
        "25m": dict(hidden_size=512, num_layers=8, num_heads=8, vocab_size=256,
                    max_position_embeddings=256, window_size=64),
        "125m": dict(hidden_size=768, num_layers=12, num_heads=12, vocab_size=50257,
                     max_position_embeddings=2048, window_size=256),
        "1.3b": dict(hidden_size=2048, num_layers=24, num_heads=16, vocab_size=50257,
                     max_position_embeddings=2048, window_size=256),
    },
    "gpt-neo-x": {
        "tiny": dict(hidden_size=64, num_layers=2, num_heads=4, vocab_size=256,
                     intermediate_size=256, max_position_embeddings=256),
        "160m": dict(hidden_size=768, num_layers=12, num_heads=12, vocab_size=50304,
                     intermediate_size=3072, max_position_embeddings=2048),
        "410m": dict(hidden_size=1024, num_layers=24, num_heads=16, vocab_size=50304,
                     intermediate_size=4096, max_position_embeddings=2048),
        "1.4b": dict(hidden_size=2048, num_layers=24, num_heads=16, vocab_size=50304,
                     intermediate_size=8192, max_position_embeddings=2048),
    },
    "gcn": {
        "tiny": dict(hidden_channels=16, num_layers=2, dropout=0.0,
                     in_channels=16, num_classes=5),
        "arxiv": dict(hidden_channels=256, num_layers=3, dropout=0.5,
                      in_channels=128, num_classes=40),
    },
    "resnet50": {
        "tiny": dict(depths=[1, 1, 1, 1], hidden_sizes=[16, 32, 64, 128],
                     embedding_size=8, num_labels=10, image_size=32),
        "full": dict(depths=[3, 4, 6, 3], hidden_sizes=[256, 512, 1024, 2048],
                     embedding_size=64, num_labels=1000, image_size=224),
    },
    "resnet101": {
        "tiny": dict(depths=[1, 1, 2, 1], hidden_sizes=[16, 32, 64, 128],
                     embedding_size=8, num_labels=10, image_size=32),
        "full": dict(depths=[3, 4, 23, 3], hidden_sizes=[256, 512, 1024, 2048],
                     embedding_size=64, num_labels=1000, image_size=224),
    },
    "wav2vec2": {
        "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, conv_dim=[32, 32], conv_kernel=[10, 3],
                     conv_stride=[5, 2], num_codevectors_per_group=16,
                     codevector_dim=16, proj_codevector_dim=16,
                     num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2),
        "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                     intermediate_size=3072, conv_dim=[512] * 7,
                     conv_kernel=[10, 3, 3, 3, 3, 2, 2], conv_stride=[5, 2, 2, 2, 2, 2, 2],
                     num_codevectors_per_group=320, codevector_dim=256,
                     proj_codevector_dim=256, num_conv_pos_embeddings=128,
                     num_conv_pos_embedding_groups=16),
    },
}

# Which data sources make sense for which model family.
MODEL_DATA: dict[str, tuple[str, ...]] = {
    "gpt-neo": ("markov", "c4"),
    "gpt-neo-x": ("markov", "c4"),
    "gcn": ("synthetic-graph", "ogbn-arxiv"),
    "resnet50": ("synthetic-images", "imagenet"),
    "resnet101": ("synthetic-images", "imagenet"),
    "wav2vec2": ("synthetic-audio", "librispeech"),
}


def catalog() -> dict[str, list[str]]:
    """Model name -> its size names, in the order the table lists them."""
    return {model: list(sizes) for model, sizes in MODEL_SIZES.items()}
