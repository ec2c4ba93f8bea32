"""The model corpus: real architectures at tiny sizes, random weights, nothing downloaded.

Transformer encoders and decoders come from `transformers`' own classes built from small
configs (2 layers, hidden 32–64): the code a user's model runs, not a look-alike. CNN families
are written here (torchvision's wheel does not import beside this torch; facts.md) in the shape
of their papers: ResNet bottlenecks, MobileNetV2 inverted residuals with depthwise convs, a ViT
patch embedding + pre-norm encoder block.

Each factory returns (model, example inputs); `CORPUS` says how to make held-out inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

VOCAB, SEQ = 128, 16


# --- transformers ----------------------------------------------------------------------------

def bert():
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=64)
    return BertModel(config).eval(), (token_ids(0),)


def distilbert():
    from transformers import DistilBertConfig, DistilBertModel
    torch.manual_seed(0)
    config = DistilBertConfig(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=2, hidden_dim=128,
                              max_position_embeddings=64)
    return DistilBertModel(config).eval(), (token_ids(0),)


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                        use_cache=False, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config).eval(), (token_ids(0),)


def llama():
    """A Llama-style causal LM (RoPE, RMSNorm, SwiGLU, grouped-query attention) with
    transformers' default `use_cache=True`: edgekit builds it without a cache and says so."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64)
    return LlamaForCausalLM(config).eval(), (token_ids(0),)


def t5_encoder():
    """T5's encoder: relative-position buckets from `arange` (integer math), RMS-style norm."""
    from transformers import T5Config, T5EncoderModel
    torch.manual_seed(0)
    config = T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2,
                      num_heads=2)
    return T5EncoderModel(config).eval(), (token_ids(0),)


MELS, FRAMES = 16, 32


def whisper_encoder():
    """Whisper's audio encoder: two 1-D convolutions over log-mel frames, sinusoidal
    positions, pre-norm attention."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    torch.manual_seed(0)
    config = WhisperConfig(num_mel_bins=MELS, d_model=32, encoder_layers=2,
                           encoder_attention_heads=2, encoder_ffn_dim=64,
                           max_source_positions=FRAMES // 2, vocab_size=VOCAB)
    return WhisperEncoder(config).eval(), (mel_frames(0),)


def clip_text():
    """CLIP's text tower: causal mask, pooled at the end-of-text token (argmax of the ids)."""
    from transformers import CLIPTextConfig, CLIPTextModel
    torch.manual_seed(0)
    config = CLIPTextConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                            num_hidden_layers=2, num_attention_heads=2,
                            max_position_embeddings=SEQ, eos_token_id=2)
    return CLIPTextModel(config).eval(), (token_ids(0),)


def mel_frames(seed: int) -> torch.Tensor:
    return torch.randn(1, MELS, FRAMES, generator=torch.Generator().manual_seed(seed))


def qwen2():
    """Qwen2-style: biased q/k/v projections, grouped-query attention."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    return _tiny_causal_lm(Qwen2Config, Qwen2ForCausalLM)


def phi3():
    """Phi-3-style: fused qkv and gate/up projections."""
    from transformers import Phi3Config, Phi3ForCausalLM
    return _tiny_causal_lm(Phi3Config, Phi3ForCausalLM, pad_token_id=0)


def _tiny_causal_lm(config_class, model_class, **extra):
    torch.manual_seed(0)
    config = config_class(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          max_position_embeddings=64, eos_token_id=None, **extra)
    return model_class(config).eval(), (token_ids(0),)


def token_ids(seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(seed))


# --- CNNs and a ViT block, in-tree -----------------------------------------------------------

class Bottleneck(nn.Module):
    """ResNet-50's block: 1x1 reduce, 3x3 (strided), 1x1 expand, projection shortcut."""

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * 4
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.shortcut = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    """ResNet-style: 7x7 stem, max-pool, bottleneck stages, global pool, classifier.
    `blocks=(3, 4, 6, 3), base=64` is ResNet-50's layout (25.6 M parameters)."""

    def __init__(self, blocks=(1, 1), base: int = 8, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, base, 7, 2, 3, bias=False), nn.BatchNorm2d(base),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        stages, cin = [], base
        for i, n in enumerate(blocks):
            width = base * 2 ** i
            for j in range(n):
                stages.append(Bottleneck(cin, width, 2 if j == 0 and i > 0 else 1))
                cin = width * 4
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.stages(
            self.stem(x)), 1), 1))


def resnet():
    torch.manual_seed(0)
    return _randomized_bn(ResNet()).eval(), (torch.randn(1, 3, 64, 64),)


def resnet50():
    """ResNet-50-sized (random weights, 224x224): for timing `check` against a build."""
    torch.manual_seed(0)
    return _randomized_bn(ResNet((3, 4, 6, 3), 64, 1000)).eval(), (torch.randn(1, 3, 224, 224),)


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, 3x3 depthwise, 1x1 linear projection."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int = 4):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.body = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.body(x)
        return x + y if self.use_res else y


def mobilenet():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6(),
        InvertedResidual(16, 16, 1), InvertedResidual(16, 24, 2), InvertedResidual(24, 24, 1),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, 10))
    return _randomized_bn(model).eval(), (torch.randn(1, 3, 64, 64),)


class ViT(nn.Module):
    """ViT-style: conv patch embedding, class token, learned positions, pre-norm encoder
    layers (multi-head attention + GELU MLP), LayerNorm, head on the class token."""

    def __init__(self, image: int = 32, patch: int = 8, dim: int = 32, layers: int = 2,
                 classes: int = 10):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        tokens = (image // patch) ** 2 + 1
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(dim, 2, dim * 2, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True), layers,
            enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.encoder(x))[:, 0])


def vit():
    torch.manual_seed(0)
    return ViT().eval(), (torch.randn(1, 3, 32, 32),)


class RegNetBlock(nn.Module):
    """RegNetY's block: 1x1, 3x3 grouped convolution (group width 8), squeeze-excite, 1x1,
    projection shortcut."""

    def __init__(self, cin: int, cout: int, stride: int, group_width: int = 8):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout),
                               nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(cout, cout, 3, stride, 1, groups=cout // group_width,
                                         bias=False), nn.BatchNorm2d(cout), nn.ReLU())
        squeeze = max(1, cin // 4)
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cout, squeeze, 1), nn.ReLU(),
                                nn.Conv2d(squeeze, cout, 1), nn.Sigmoid())
        self.c = nn.Sequential(nn.Conv2d(cout, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                  nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b(self.a(x))
        return torch.relu(self.proj(x) + self.c(y * self.se(y)))


def regnet():
    """RegNetY-style (RegNetY-400MF's block at widths 32 and 256: 4 and 32 groups; 32 and more
    is what torch-mlir's TOSA lowering does not take whole, RegNetY-400MF has 55)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        RegNetBlock(16, 32, 2), RegNetBlock(32, 256, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10))
    return _randomized_bn(model).eval(), (torch.randn(1, 3, 32, 32),)


class DeepLab(nn.Module):
    """DeepLabV3-MobileNetV3-style segmentation: a hardswish/squeeze-excite (hardsigmoid)
    backbone with a dilated depthwise stage, ASPP (1x1, atrous 3x3, image pooling upsampled
    bilinearly) and the logits upsampled bilinearly to the input's size."""

    def __init__(self, classes: int = 5):
        super().__init__()
        act = nn.Hardswish
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), act(),
            nn.Conv2d(16, 16, 3, 2, 1, groups=16, bias=False), nn.BatchNorm2d(16), act(),
            nn.Conv2d(16, 24, 1, bias=False), nn.BatchNorm2d(24),
            nn.Conv2d(24, 24, 3, 1, 2, dilation=2, groups=24, bias=False), nn.BatchNorm2d(24),
            act())
        self.excite = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(24, 8, 1), nn.ReLU(),
                                    nn.Conv2d(8, 24, 1), nn.Hardsigmoid())
        self.branches = nn.ModuleList([
            nn.Sequential(nn.Conv2d(24, 16, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()),
            nn.Sequential(nn.Conv2d(24, 16, 3, padding=2, dilation=2, bias=False),
                          nn.BatchNorm2d(16), nn.ReLU())])
        self.pooling = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(24, 16, 1, bias=False),
                                     nn.ReLU())
        self.project = nn.Sequential(nn.Conv2d(48, 16, 1, bias=False), nn.BatchNorm2d(16),
                                     nn.ReLU(), nn.Conv2d(16, classes, 1))

    def forward(self, x):
        f = self.backbone(x)
        f = f * self.excite(f)
        pooled = nn.functional.interpolate(self.pooling(f), size=f.shape[-2:], mode="bilinear",
                                           align_corners=False)
        y = self.project(torch.cat([*(b(f) for b in self.branches), pooled], dim=1))
        return nn.functional.interpolate(y, size=x.shape[-2:], mode="bilinear",
                                         align_corners=False)


def deeplab():
    torch.manual_seed(0)
    return _randomized_bn(DeepLab()).eval(), (torch.randn(1, 3, 32, 32),)


def _randomized_bn(model: nn.Module) -> nn.Module:
    """Fresh BatchNorm statistics are the identity; random ones make folding them matter."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
    return model


@dataclass(frozen=True)
class Entry:
    name: str
    family: str
    factory: str                          # attribute of this module
    held_out: Callable[[int], tuple[torch.Tensor, ...]]  # seed → inputs the build never saw
    # what `lowering: auto` must choose: TOSA (the NPU path) for every architecture whose ops
    # it takes once edgekit has legalised them (pipeline/rewrite_tosa.py)
    lowering: str = "tosa"

    @property
    def python(self) -> str:
        return f"{__file__}:{self.factory}"


def _image(shape):
    return lambda seed: (torch.randn(shape, generator=torch.Generator().manual_seed(seed)),)


CORPUS = (
    Entry("bert", "BERT encoder (transformers BertModel)", "bert", lambda s: (token_ids(s),)),
    Entry("distilbert", "DistilBERT encoder (transformers DistilBertModel)", "distilbert",
          lambda s: (token_ids(s),)),
    Entry("gpt2", "GPT-2 decoder with LM head (transformers GPT2LMHeadModel)", "gpt2",
          lambda s: (token_ids(s),)),
    Entry("resnet", "ResNet (bottleneck blocks, BatchNorm, max-pool)", "resnet",
          _image((1, 3, 64, 64))),
    Entry("mobilenet", "MobileNetV2 (inverted residuals, depthwise convs)", "mobilenet",
          _image((1, 3, 64, 64))),
    Entry("vit", "ViT (patch embedding, pre-norm encoder, GELU)", "vit", _image((1, 3, 32, 32))),
    Entry("t5_encoder", "T5 encoder (transformers T5EncoderModel, relative positions)",
          "t5_encoder", lambda s: (token_ids(s),)),
    Entry("whisper_encoder", "Whisper audio encoder (transformers WhisperEncoder)",
          "whisper_encoder", lambda s: (mel_frames(s),)),
    Entry("clip_text", "CLIP text tower (transformers CLIPTextModel)", "clip_text",
          lambda s: (token_ids(s),)),
    Entry("regnet", "RegNetY (grouped 3x3 convolutions, squeeze-excite)", "regnet",
          _image((1, 3, 32, 32))),
    Entry("deeplab", "DeepLabV3-MobileNetV3 (dilated depthwise, ASPP, bilinear upsampling)",
          "deeplab", _image((1, 3, 32, 32))),
    Entry("llama", "Llama-style decoder with LM head, no KV cache (transformers "
          "LlamaForCausalLM)", "llama", lambda s: (token_ids(s),)),
)
