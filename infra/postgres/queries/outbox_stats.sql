-- outbox_stats counts the invoice events waiting to be published and the age
-- of the oldest, in seconds: the relay's gauges.
SELECT count(*), coalesce(extract(epoch FROM now() - min(occurred_at)), 0)::float8 FROM invoice_outbox;
