"""The tiny random-weight Llama the real-server checks serve (scripts/serve_engine_vllm.sh,
scripts/serve_engine_sglang.sh): ``python serve_tiny_llama.py FOLDER``, run with the
engine's own interpreter (torch, transformers, tokenizers); nothing is downloaded.

Its vocabulary is dltop's synthetic prompt words (openai_tokens.WORDS), one token each,
and 200 others, with a BOS from the chat template as Llama's (the server's prompt count
is one above dltop's); EOS is made to win where w192 would, so some answers end early.
"""
import sys

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

COMMON = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on",
          "be", "at", "by", "this", "from", "or", "an", "are", "not", "but", "all"]
words = ["<unk>", "<s>", "</s>", *COMMON, *(f"w{i}" for i in range(200))]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                   special_tokens=[("<s>", 1)])
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                               eos_token="</s>")
# a BOS from the template, as Llama's: the server's prompt count is one above dltop's
fast.chat_template = "{{ bos_token }}{% for m in messages %}{{ m['content'] }} {% endfor %}"
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=len(words), hidden_size=128, intermediate_size=256,
                  num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                  max_position_embeddings=512, bos_token_id=1, eos_token_id=2,
                  tie_word_embeddings=False)
model = LlamaForCausalLM(cfg)
with torch.no_grad():  # EOS beats w192 where w192 would win: most answers end early
    model.lm_head.weight[2] = model.lm_head.weight[words.index("w192")] * 1.3
model.save_pretrained(sys.argv[1])
fast.save_pretrained(sys.argv[1])
