/**
 * FP8 training with per-tensor scaling, Megatron's {@code --fp8-format} and {@code --fp8-recipe}: the
 * configuration ({@link io.mcore4j.core.fp8.Fp8Config}), the scaling state of every FP8 tensor of a model
 * ({@link io.mcore4j.core.fp8.Fp8Scaling}: Transformer Engine's delayed scaling, amax histories and scales on
 * the device), and the FP8 linear ({@link io.mcore4j.core.fp8.Fp8Linear}: the three GEMMs of a linear layer on
 * float8 operands, with the weight cast once per optimizer step). Float8 tensors never reach DJL's dtype
 * mapping: they live as opaque handles between calls of mcore4j's TorchScript module.
 */
package io.mcore4j.core.fp8;
