/**
 * Hugging Face chat templates rendered in Java as transformers renders them ({@link io.mcore4j.data.chat.ChatTemplate},
 * on HubSpot's jinjava, an optional dependency of this module), and the token ids and assistant-token loss mask of
 * a chat ({@link io.mcore4j.data.chat.SftTokenizer}) for supervised fine-tuning.
 */
package io.mcore4j.data.chat;
