"""Post-training quantization for recipes: int8 (calibrated), int8 weights, fp16."""
