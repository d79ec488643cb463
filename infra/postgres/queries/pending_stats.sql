-- pending_stats counts the pending invoices, how long ago the oldest one's
-- key started, in seconds, and the held invoices, each from its partial
-- index (invoice_pending_updated_at_idx, invoice_held_idx): the completer's
-- gauges.
SELECT
	(SELECT count(*) FROM invoice WHERE status = 'pending'),
	(SELECT coalesce(extract(epoch FROM now() - min(updated_at)), 0)::float8 FROM invoice WHERE status = 'pending'),
	(SELECT count(*) FROM invoice WHERE status = 'held');
