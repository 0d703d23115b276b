/**
 * Model configuration: {@link io.mcore4j.models.TransformerConfig}, validated against a parallel
 * layout, and recipes of well-known shapes ({@link io.mcore4j.models.GptConfigs}).
 */
package io.mcore4j.models;
