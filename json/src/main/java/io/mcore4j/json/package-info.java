/**
 * Strict JSON (RFC 8259) value reading shared by the modules that parse JSON: {@link
 * io.mcore4j.json.StrictValueReader} walks arrays and objects on Gson's streaming reader, builds plain
 * Java values and refuses a key that appears twice in one object; its callers decide, through small
 * hooks, how strings and numbers become values and how an error is reported. Depends only on Gson.
 */
package io.mcore4j.json;
