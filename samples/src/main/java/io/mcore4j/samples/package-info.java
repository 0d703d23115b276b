/**
 * Programs that use mcore4j exactly as a downstream training framework would: through the public
 * API of its modules, imported with the BOM.
 */
package io.mcore4j.samples;
