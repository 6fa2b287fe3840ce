-- What the PostgreSQL exporter reads of pgBackRest's repository (D28): the newest
-- backup of each type, from `pgbackrest info --output=json` run by the primary's
-- PostgreSQL (COPY FROM PROGRAM), for deploy/prometheus/postgres-exporter-queries.yaml
-- and the PetstoreBackupMissing alert. Run once as a superuser on the primary, in
-- the petstore database (it replicates to the secondaries and is in every backup):
--   psql -d petstore -f deploy/postgres/pgbackrest-monitor.sql
-- A secondary answers no row (it cannot write the temporary table): the exporter of
-- the primary reports the backups.
CREATE SCHEMA IF NOT EXISTS pgbackrest_monitor;

CREATE OR REPLACE FUNCTION pgbackrest_monitor.backups()
RETURNS TABLE (type text, stop double precision)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    info jsonb;
BEGIN
    IF pg_is_in_recovery() THEN
        RETURN;
    END IF;
    CREATE TEMPORARY TABLE pgbackrest_info (data text) ON COMMIT DROP;
    -- One line of JSON; csv with characters JSON never holds unescaped as delimiter
    -- and quote, so that nothing in it is read as an escape.
    COPY pgbackrest_info (data) FROM PROGRAM 'pgbackrest --stanza=petstore --output=json info'
        WITH (FORMAT csv, DELIMITER E'\x01', QUOTE E'\x02');
    SELECT string_agg(data, '')::jsonb INTO info FROM pgbackrest_info;
    DROP TABLE pgbackrest_info;
    RETURN QUERY
        SELECT b->>'type', (b->'timestamp'->>'stop')::double precision
        FROM jsonb_array_elements(info->0->'backup') AS b
        WHERE NOT (b->>'error')::boolean;
END
$$;

REVOKE ALL ON FUNCTION pgbackrest_monitor.backups() FROM PUBLIC;
GRANT USAGE ON SCHEMA pgbackrest_monitor TO pg_monitor;
GRANT EXECUTE ON FUNCTION pgbackrest_monitor.backups() TO pg_monitor;
