/**
 * Mixture of experts as in Megatron-Core: {@link io.mcore4j.moe.MoeLayer} (router, token
 * dispatch by all-gather or all-to-all over expert parallelism, optionally tensor-parallel expert
 * MLPs, shared expert) configured by {@link io.mcore4j.moe.MoeConfig}. Auxiliary load-balancing and
 * z-losses reach the gradients through {@link io.mcore4j.moe.AuxLossAutoScaler} with the upstream
 * gradient held by {@link io.mcore4j.moe.AuxLossScale}.
 */
package io.mcore4j.moe;
