/**
 * Supervised fine-tuning data: JSON Lines chats and prompt/completion pairs, tokenized once with their chat
 * template and assistant-token masks ({@link io.mcore4j.data.chat.SftTokenizer}), cached in Megatron's indexed
 * format, split as Megatron splits datasets and served as fixed-length samples with a loss mask.
 */
package io.mcore4j.data.sft;
