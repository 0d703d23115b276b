/**
 * Transformer building blocks (norms, attention, MLP, the layer) that hold no parallelism logic of
 * their own: which linear is column- or row-parallel is decided by the
 * {@link io.mcore4j.models.transformer.LayerSpec}, and the parallel linears live in
 * {@code tensor-parallel}.
 */
package io.mcore4j.models.transformer;
