/**
 * The GPT model: vocab-parallel embeddings, a stack of transformer layers, the final norm, the
 * (optionally tied) vocab-parallel output layer and cross-entropy. A {@link io.mcore4j.models.gpt.GptModel}
 * is one pipeline chunk: the layers one rank holds for one virtual stage.
 */
package io.mcore4j.models.gpt;
