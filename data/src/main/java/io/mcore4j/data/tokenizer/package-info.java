/**
 * Text-to-token-id conversion used to prepare data: the {@link io.mcore4j.data.tokenizer.Tokenizer}
 * contract and a byte-level tokenizer that needs no vocabulary file (UTF-8 bytes are the ids, plus one
 * end-of-document id).
 */
package io.mcore4j.data.tokenizer;
