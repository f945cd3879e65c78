package pgsimba

import "strings"

// schema creates the tables and routines of one namespace. "{p}" is the
// validated table prefix (core.Expand); nothing else is interpolated. Every
// statement is idempotent and the whole runs under a transaction-scoped
// advisory lock, so many processes may start at once (concurrent CREATE ...
// IF NOT EXISTS alone can fail on PostgreSQL's catalog unique indexes).
//
// Time is always clock_timestamp(), the wall clock at the moment of the
// call, never now(), which is frozen at the start of the transaction.
// Routines are suffixed _v1 so that a later release can add _v2 next to
// them while older processes still run.
//
// schema is version 1, the first schema, which recorded no version; it is
// never changed. Later versions are migrations (migrations[n] brings
// version n to n+1), which add routines beside the old ones and never
// change an installed body (docs/adr/0081-sql-schema-versions.md).
const schema = `
CREATE TABLE IF NOT EXISTS {p}_sessions (
    id         text        PRIMARY KEY,
    expires_at timestamptz NOT NULL,
    lease      interval    NOT NULL,
    version    bigint      NOT NULL
);

-- A lease is owned by session_id only while held. Release clears held and
-- keeps session_id and token, so releasing, and a session taking back a
-- name it held before, change no indexed column (a HOT update).
CREATE TABLE IF NOT EXISTS {p}_leases (
    name       text    PRIMARY KEY,
    session_id text,
    token      bigint  NOT NULL,
    held       boolean NOT NULL
);

CREATE INDEX IF NOT EXISTS {p}_leases_session_idx ON {p}_leases (session_id);

CREATE OR REPLACE FUNCTION {p}_open_v1(p_id text, p_lease_us bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_exp timestamptz;
BEGIN
    -- An expired session answers "expired" whether or not its row exists,
    -- so expired rows may go: a few per open, skipping rows others lock.
    DELETE FROM {p}_sessions s WHERE s.id IN (
        SELECT g.id FROM {p}_sessions g WHERE g.expires_at < clock_timestamp()
        LIMIT 100 FOR UPDATE SKIP LOCKED);
    INSERT INTO {p}_sessions AS s (id, expires_at, lease, version)
    VALUES (p_id, clock_timestamp() + p_lease_us * interval '1 microsecond',
            p_lease_us * interval '1 microsecond', 1)
    RETURNING s.expires_at INTO v_exp;
    RETURN (extract(epoch FROM v_exp - clock_timestamp()) * 1000000)::bigint;
END $$;

CREATE OR REPLACE FUNCTION {p}_renew_v1(p_id text, p_known bigint)
RETURNS TABLE (r_remaining_us bigint, r_version bigint, r_name text, r_token bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_exp timestamptz;
    v_ver bigint;
BEGIN
    -- Lock, then read the clock: a renewal that waited for the lock judges
    -- expiry by the time it got it, so it never revives a session that
    -- expired meanwhile (and lost its leases to others).
    PERFORM 1 FROM {p}_sessions s WHERE s.id = p_id FOR NO KEY UPDATE;
    UPDATE {p}_sessions s SET expires_at = clock_timestamp() + s.lease
     WHERE s.id = p_id AND s.expires_at > clock_timestamp()
    RETURNING s.expires_at, s.version INTO v_exp, v_ver;
    IF NOT FOUND THEN
        RETURN; -- no row at all: expired or unknown
    END IF;
    r_remaining_us := (extract(epoch FROM v_exp - clock_timestamp()) * 1000000)::bigint;
    r_version := v_ver;
    RETURN NEXT;
    IF v_ver <> p_known THEN
        -- Acquire and release change the version last, under this row's
        -- lock, which this transaction holds: the list matches v_ver.
        RETURN QUERY SELECT NULL::bigint, NULL::bigint, l.name, l.token
                       FROM {p}_leases l WHERE l.session_id = p_id AND l.held;
    END IF;
END $$;

CREATE OR REPLACE FUNCTION {p}_acquire_v1(p_id text, p_names text[])
RETURNS TABLE (r_name text, r_token bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_name  text;
    v_owner text;
    v_token bigint;
    v_held  boolean;
    v_alive boolean;
    v_won   boolean := false;
BEGIN
    -- Whether the session is alive is checked at the end, once, by the
    -- statement that must run anyway (or by a read if nothing was won);
    -- an expired session fails with SQLSTATE SX001, which rolls back all
    -- it did here.
    -- p_names is sorted, so concurrent calls lock lease rows in one order.
    FOREACH v_name IN ARRAY p_names LOOP
        r_name := v_name;
        -- Fast path: a released lease (its row kept, not held).
        UPDATE {p}_leases l SET session_id = p_id, held = true,
               token = greatest(l.token + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
         WHERE l.name = v_name AND NOT l.held
        RETURNING l.token INTO v_token;
        IF FOUND THEN
            v_won := true;
            r_token := v_token;
            RETURN NEXT;
            CONTINUE;
        END IF;
        -- A new name starts at the clock in microseconds, so that tokens
        -- keep rising even if the table was emptied (ADR 0031).
        INSERT INTO {p}_leases AS l (name, session_id, token, held)
        VALUES (v_name, p_id, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, true)
        ON CONFLICT (name) DO NOTHING
        RETURNING l.token INTO v_token;
        IF FOUND THEN
            v_won := true;
            r_token := v_token;
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT l.session_id, l.token, l.held INTO v_owner, v_token, v_held
          FROM {p}_leases l WHERE l.name = v_name FOR UPDATE;
        IF v_held AND v_owner = p_id THEN
            r_token := v_token; -- already ours: the token it is owned under
            RETURN NEXT;
            CONTINUE;
        END IF;
        v_alive := NULL;
        IF v_held THEN
            SELECT s.expires_at > clock_timestamp() INTO v_alive
              FROM {p}_sessions s WHERE s.id = v_owner;
            IF v_alive IS NOT TRUE THEN
                -- Looks expired. A renewal may be in flight: its row lock
                -- conflicts with this share lock, so wait for it and look
                -- again. (Only here: locking live owners' rows would let two
                -- candidates deadlock on each other's sessions.)
                PERFORM 1 FROM {p}_sessions s WHERE s.id = v_owner FOR SHARE;
                SELECT s.expires_at > clock_timestamp() INTO v_alive
                  FROM {p}_sessions s WHERE s.id = v_owner;
            END IF;
        END IF;
        IF v_alive THEN
            r_token := 0;
        ELSE
            UPDATE {p}_leases l SET session_id = p_id, held = true,
                   token = greatest(l.token + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
             WHERE l.name = v_name
            RETURNING l.token INTO v_token;
            v_won := true;
            r_token := v_token;
        END IF;
        RETURN NEXT;
    END LOOP;
    IF v_won THEN
        UPDATE {p}_sessions s SET version = s.version + 1
         WHERE s.id = p_id AND s.expires_at > clock_timestamp();
    ELSE
        PERFORM 1 FROM {p}_sessions s WHERE s.id = p_id AND s.expires_at > clock_timestamp();
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'simba: session % expired or unknown', p_id USING ERRCODE = 'SX001';
    END IF;
END $$;

CREATE OR REPLACE FUNCTION {p}_release_v1(p_id text, p_names text[], p_tokens bigint[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer := 0;
BEGIN
    -- Only this transaction's commit skips waiting for its WAL flush
    -- (ADR 0034): a release lost in a crash leaves the lease held by a
    -- live session, which its engine releases again, or which expires with
    -- it; never two holders, since any acquire that saw the release
    -- commits synchronously and so flushes the release's WAL first. SET
    -- LOCAL outlives this function (it has no SET clause) and ends with
    -- the transaction, which the caller's statement is.
    SET LOCAL synchronous_commit = off;
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        -- The row and its token are kept: the next term counts up from it.
        UPDATE {p}_leases l SET held = false
         WHERE l.name = p_names[i] AND l.token = p_tokens[i] AND l.session_id = p_id AND l.held;
        IF FOUND THEN
            v_n := v_n + 1;
            -- Delivered at commit, only if the release commits.
            PERFORM pg_notify('{p}_released', p_names[i]);
        END IF;
    END LOOP;
    IF v_n > 0 THEN
        UPDATE {p}_sessions s SET version = s.version + 1 WHERE s.id = p_id;
    END IF;
    RETURN v_n;
END $$;

CREATE OR REPLACE FUNCTION {p}_close_v1(p_id text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_name text;
    v_n    integer := 0;
BEGIN
    FOR v_name IN SELECT l.name FROM {p}_leases l WHERE l.session_id = p_id AND l.held
                   ORDER BY l.name FOR UPDATE LOOP
        UPDATE {p}_leases l SET held = false WHERE l.name = v_name;
        PERFORM pg_notify('{p}_released', v_name);
        v_n := v_n + 1;
    END LOOP;
    DELETE FROM {p}_sessions s WHERE s.id = p_id;
    RETURN v_n;
END $$;
`

// migrations[n] brings a namespace from schema version n to n+1, in one
// transaction (PostgreSQL's DDL is transactional).
var migrations = map[int]string{
	// 2: the sessions' owner (identity and metadata as JSON, NULL from
	// version 1 routines), <p>_open_v2 that stores it, and <p>_schema
	// that records the version. Version 1 code keeps running on it.
	1: `
ALTER TABLE {p}_sessions ADD COLUMN IF NOT EXISTS owner text;

CREATE OR REPLACE FUNCTION {p}_open_v2(p_id text, p_lease_us bigint, p_owner text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_exp timestamptz;
BEGIN
    DELETE FROM {p}_sessions s WHERE s.id IN (
        SELECT g.id FROM {p}_sessions g WHERE g.expires_at < clock_timestamp()
        LIMIT 100 FOR UPDATE SKIP LOCKED);
    INSERT INTO {p}_sessions AS s (id, expires_at, lease, version, owner)
    VALUES (p_id, clock_timestamp() + p_lease_us * interval '1 microsecond',
            p_lease_us * interval '1 microsecond', 1, nullif(p_owner, ''))
    RETURNING s.expires_at INTO v_exp;
    RETURN (extract(epoch FROM v_exp - clock_timestamp()) * 1000000)::bigint;
END $$;

CREATE TABLE IF NOT EXISTS {p}_schema (
    id              integer PRIMARY KEY CHECK (id = 1),
    version         integer NOT NULL,
    compatible_from integer NOT NULL
);
INSERT INTO {p}_schema (id, version, compatible_from) VALUES (1, 2, 1)
ON CONFLICT (id) DO UPDATE SET version = excluded.version, compatible_from = excluded.compatible_from;
`,
	// 3 (ADR 0130, ADR 0135): the namespace's epoch row, which the
	// acquire routine checks in the transaction that grants, and whose
	// absence (the tables emptied, a restore from a backup without it)
	// starts a quarantine of one maximum lease; and every routine bounds
	// its lock waits (lock_timeout, set for its own transaction only, from
	// the caller's deadline). The _v1 routines stay for processes not yet
	// upgraded; they neither check the epoch nor bound their waits.
	//
	// Detection needs a mark in every table that can lose its rows: the
	// epoch row, and a marker row '~epoch' in <p>_sessions and in
	// <p>_leases (never a session id nor a lease name: neither is valid;
	// the session marker never expires, so no open routine collects it).
	// Tables emptied one after the other (TRUNCATE a; TRUNCATE b) would
	// otherwise leave a window in which sessions are gone, leases look
	// free and the epoch row is still there.
	//
	// The migration creates the markers (they mark these tables from now
	// on) but leaves the epoch table empty: tables that already existed
	// may have just been restored from an old backup, so the first
	// acquire after it quarantines (once, for one maximum lease). Only
	// the creation of a new namespace (Migration from 0) writes the epoch
	// row, in the same transaction that creates the tables.
	2: `
CREATE TABLE IF NOT EXISTS {p}_epoch (
    id               integer     PRIMARY KEY CHECK (id = 1),
    quarantine_until timestamptz NOT NULL
);

INSERT INTO {p}_sessions (id, expires_at, lease, version) VALUES ('~epoch', 'infinity', interval '0', 0)
ON CONFLICT (id) DO NOTHING;
INSERT INTO {p}_leases (name, session_id, token, held) VALUES ('~epoch', NULL, 0, false)
ON CONFLICT (name) DO NOTHING;

CREATE OR REPLACE FUNCTION {p}_open_v3(p_id text, p_lease_us bigint, p_owner text, p_wait_ms bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_exp timestamptz;
BEGIN
    -- For this call's transaction only (is_local): a lock wait longer
    -- than the caller's deadline fails (SQLSTATE 55P03) instead of
    -- committing after the caller gave up.
    PERFORM set_config('lock_timeout', p_wait_ms || 'ms', true);
    DELETE FROM {p}_sessions s WHERE s.id IN (
        SELECT g.id FROM {p}_sessions g WHERE g.expires_at < clock_timestamp()
        LIMIT 100 FOR UPDATE SKIP LOCKED);
    INSERT INTO {p}_sessions AS s (id, expires_at, lease, version, owner)
    VALUES (p_id, clock_timestamp() + p_lease_us * interval '1 microsecond',
            p_lease_us * interval '1 microsecond', 1, nullif(p_owner, ''))
    RETURNING s.expires_at INTO v_exp;
    RETURN (extract(epoch FROM v_exp - clock_timestamp()) * 1000000)::bigint;
END $$;

CREATE OR REPLACE FUNCTION {p}_renew_v2(p_id text, p_known bigint, p_wait_ms bigint)
RETURNS TABLE (r_remaining_us bigint, r_version bigint, r_name text, r_token bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_exp timestamptz;
    v_ver bigint;
BEGIN
    PERFORM set_config('lock_timeout', p_wait_ms || 'ms', true);
    -- Lock, then read the clock (see renew_v1).
    PERFORM 1 FROM {p}_sessions s WHERE s.id = p_id FOR NO KEY UPDATE;
    UPDATE {p}_sessions s SET expires_at = clock_timestamp() + s.lease
     WHERE s.id = p_id AND s.expires_at > clock_timestamp()
    RETURNING s.expires_at, s.version INTO v_exp, v_ver;
    IF NOT FOUND THEN
        RETURN; -- no row at all: expired or unknown (or lost with the tables)
    END IF;
    r_remaining_us := (extract(epoch FROM v_exp - clock_timestamp()) * 1000000)::bigint;
    r_version := v_ver;
    RETURN NEXT;
    IF v_ver <> p_known THEN
        RETURN QUERY SELECT NULL::bigint, NULL::bigint, l.name, l.token
                       FROM {p}_leases l WHERE l.session_id = p_id AND l.held;
    END IF;
END $$;

-- acquire_v2 answers (r_name, r_token) per name; it fails with SQLSTATE
-- SX002, rolling back all it did, when the namespace's records were lost
-- or it is quarantined (the client then calls epoch_v1).
CREATE OR REPLACE FUNCTION {p}_acquire_v2(p_id text, p_names text[], p_quarantine_us bigint, p_wait_ms bigint)
RETURNS TABLE (r_name text, r_token bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_name  text;
    v_owner text;
    v_token bigint;
    v_held  boolean;
    v_alive boolean;
    v_won   boolean := false;
BEGIN
    PERFORM set_config('lock_timeout', p_wait_ms || 'ms', true);
    -- As acquire_v1 (see its comments), and the statement at the end
    -- that checks the session also checks the epoch row and both
    -- markers (ADR 0130, 0135): nothing granted here commits unless all
    -- three exist and the quarantine has passed. It runs last, after
    -- every lock wait, so it sees a loss that committed meanwhile (a
    -- DELETE of the leases while this waited for a row, say); the rows
    -- are read, not locked.
    FOREACH v_name IN ARRAY p_names LOOP
        r_name := v_name;
        UPDATE {p}_leases l SET session_id = p_id, held = true,
               token = greatest(l.token + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
         WHERE l.name = v_name AND NOT l.held
        RETURNING l.token INTO v_token;
        IF FOUND THEN
            v_won := true;
            r_token := v_token;
            RETURN NEXT;
            CONTINUE;
        END IF;
        INSERT INTO {p}_leases AS l (name, session_id, token, held)
        VALUES (v_name, p_id, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, true)
        ON CONFLICT (name) DO NOTHING
        RETURNING l.token INTO v_token;
        IF FOUND THEN
            v_won := true;
            r_token := v_token;
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT l.session_id, l.token, l.held INTO v_owner, v_token, v_held
          FROM {p}_leases l WHERE l.name = v_name FOR UPDATE;
        IF v_held AND v_owner = p_id THEN
            r_token := v_token;
            RETURN NEXT;
            CONTINUE;
        END IF;
        v_alive := NULL;
        IF v_held THEN
            SELECT s.expires_at > clock_timestamp() INTO v_alive
              FROM {p}_sessions s WHERE s.id = v_owner;
            IF v_alive IS NOT TRUE THEN
                PERFORM 1 FROM {p}_sessions s WHERE s.id = v_owner FOR SHARE;
                SELECT s.expires_at > clock_timestamp() INTO v_alive
                  FROM {p}_sessions s WHERE s.id = v_owner;
            END IF;
        END IF;
        IF v_alive THEN
            r_token := 0;
        ELSE
            UPDATE {p}_leases l SET session_id = p_id, held = true,
                   token = greatest(l.token + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
             WHERE l.name = v_name
            RETURNING l.token INTO v_token;
            v_won := true;
            r_token := v_token;
        END IF;
        RETURN NEXT;
    END LOOP;
    IF v_won THEN
        UPDATE {p}_sessions s SET version = s.version + 1
         WHERE s.id = p_id AND s.expires_at > clock_timestamp()
           AND EXISTS (SELECT 1 FROM {p}_epoch e JOIN {p}_sessions ms ON ms.id = '~epoch' JOIN {p}_leases ml ON ml.name = '~epoch' WHERE e.id = 1 AND e.quarantine_until <= clock_timestamp());
    ELSE
        PERFORM 1 FROM {p}_sessions s WHERE s.id = p_id AND s.expires_at > clock_timestamp()
           AND EXISTS (SELECT 1 FROM {p}_epoch e JOIN {p}_sessions ms ON ms.id = '~epoch' JOIN {p}_leases ml ON ml.name = '~epoch' WHERE e.id = 1 AND e.quarantine_until <= clock_timestamp());
    END IF;
    IF NOT FOUND THEN
        PERFORM 1 FROM {p}_sessions s WHERE s.id = p_id AND s.expires_at > clock_timestamp();
        IF FOUND THEN
            RAISE EXCEPTION 'simba: namespace {p} lost its records or is quarantined' USING ERRCODE = 'SX002';
        END IF;
        RAISE EXCEPTION 'simba: session % expired or unknown', p_id USING ERRCODE = 'SX001';
    END IF;
END $$;

-- epoch_v1 runs after acquire_v2 failed with SX002: it notes a loss and
-- answers the microseconds left in the namespace's quarantine (0: none,
-- try again). A missing epoch row or marker means the records were lost
-- (the tables emptied, a restore from a backup without them): a term
-- granted before the loss lasted at most one maximum lease, so no lease
-- is granted until that long after now (p_quarantine_us). Finders take
-- turns (the table lock conflicts with itself only; acquire's reads pass),
-- so they agree on one quarantine, which later ones read, never restart.
CREATE OR REPLACE FUNCTION {p}_epoch_v1(p_quarantine_us bigint, p_wait_ms bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_until timestamptz;
    v_lost  boolean := false;
BEGIN
    PERFORM set_config('lock_timeout', p_wait_ms || 'ms', true);
    LOCK TABLE {p}_epoch IN EXCLUSIVE MODE;
    IF NOT EXISTS (SELECT 1 FROM {p}_leases WHERE name = '~epoch') THEN
        -- The leases lost their rows while sessions may live on, each
        -- believing its version still says what it owns: a new version
        -- makes each one's next renewal list what it owns now (nothing
        -- lost), so its engine ends those terms. Sessions live on.
        UPDATE {p}_sessions SET version = version + 1 WHERE id <> '~epoch';
        INSERT INTO {p}_leases (name, session_id, token, held) VALUES ('~epoch', NULL, 0, false)
        ON CONFLICT (name) DO NOTHING;
        v_lost := true;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM {p}_sessions WHERE id = '~epoch') THEN
        INSERT INTO {p}_sessions (id, expires_at, lease, version) VALUES ('~epoch', 'infinity', interval '0', 0)
        ON CONFLICT (id) DO NOTHING;
        v_lost := true;
    END IF;
    SELECT e.quarantine_until INTO v_until FROM {p}_epoch e WHERE e.id = 1;
    IF NOT FOUND THEN
        INSERT INTO {p}_epoch (id, quarantine_until)
        VALUES (1, clock_timestamp() + p_quarantine_us * interval '1 microsecond')
        RETURNING quarantine_until INTO v_until;
    ELSIF v_lost THEN
        UPDATE {p}_epoch e SET quarantine_until = greatest(e.quarantine_until, clock_timestamp() + p_quarantine_us * interval '1 microsecond')
         WHERE e.id = 1
        RETURNING e.quarantine_until INTO v_until;
    END IF;
    RETURN greatest(0, ceil(extract(epoch FROM v_until - clock_timestamp()) * 1000000))::bigint;
END $$;

CREATE OR REPLACE FUNCTION {p}_release_v2(p_id text, p_names text[], p_tokens bigint[], p_wait_ms bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer := 0;
BEGIN
    -- Both for this call's transaction only: no wait for the WAL flush
    -- (ADR 0034), and bounded lock waits.
    PERFORM set_config('synchronous_commit', 'off', true), set_config('lock_timeout', p_wait_ms || 'ms', true);
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        UPDATE {p}_leases l SET held = false
         WHERE l.name = p_names[i] AND l.token = p_tokens[i] AND l.session_id = p_id AND l.held;
        IF FOUND THEN
            v_n := v_n + 1;
            PERFORM pg_notify('{p}_released', p_names[i]);
        END IF;
    END LOOP;
    IF v_n > 0 THEN
        UPDATE {p}_sessions s SET version = s.version + 1 WHERE s.id = p_id;
    END IF;
    RETURN v_n;
END $$;

CREATE OR REPLACE FUNCTION {p}_close_v2(p_id text, p_wait_ms bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_name text;
    v_n    integer := 0;
BEGIN
    PERFORM set_config('lock_timeout', p_wait_ms || 'ms', true);
    FOR v_name IN SELECT l.name FROM {p}_leases l WHERE l.session_id = p_id AND l.held
                   ORDER BY l.name FOR UPDATE LOOP
        UPDATE {p}_leases l SET held = false WHERE l.name = v_name;
        PERFORM pg_notify('{p}_released', v_name);
        v_n := v_n + 1;
    END LOOP;
    DELETE FROM {p}_sessions s WHERE s.id = p_id;
    RETURN v_n;
END $$;

UPDATE {p}_schema SET version = 3, compatible_from = 1 WHERE id = 1;
`,
	// 4 (ADR 0160): every routine whose commit grants or extends a
	// belief (a session's deadline, a lease, a loss noted) commits with
	// at least a local WAL flush, whatever the server's, database's or
	// role's synchronous_commit: with off, a commit is acknowledged
	// before its WAL is written, and a server crash (a process kill is
	// enough) loses it while the holder believes in it, so another
	// process acquires inside the holder's term. Each new routine raises
	// the setting for its own transaction only (set_config is_local; a
	// SET clause would be undone on return, before the commit), only from
	// off, so stronger settings (on, remote_write, remote_apply) stay,
	// and calls the version 3 routine, which stays for processes not yet
	// upgraded (their commits keep the connection's setting). Release and
	// close need no flush: losing one leaves a lease held that nobody
	// believes in, and whoever acquires after seeing it flushes it with
	// its own commit (ADR 0034).
	3: `
CREATE OR REPLACE FUNCTION {p}_open_v4(p_id text, p_lease_us bigint, p_owner text, p_wait_ms bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
    RETURN {p}_open_v3(p_id, p_lease_us, p_owner, p_wait_ms);
END $$;

CREATE OR REPLACE FUNCTION {p}_renew_v3(p_id text, p_known bigint, p_wait_ms bigint)
RETURNS TABLE (r_remaining_us bigint, r_version bigint, r_name text, r_token bigint)
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
    RETURN QUERY SELECT * FROM {p}_renew_v2(p_id, p_known, p_wait_ms);
END $$;

-- SQLSTATEs SX001 and SX002 of acquire_v2 pass through unchanged.
CREATE OR REPLACE FUNCTION {p}_acquire_v3(p_id text, p_names text[], p_quarantine_us bigint, p_wait_ms bigint)
RETURNS TABLE (r_name text, r_token bigint)
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
    RETURN QUERY SELECT * FROM {p}_acquire_v2(p_id, p_names, p_quarantine_us, p_wait_ms);
END $$;

CREATE OR REPLACE FUNCTION {p}_epoch_v2(p_quarantine_us bigint, p_wait_ms bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
    RETURN {p}_epoch_v1(p_quarantine_us, p_wait_ms);
END $$;

UPDATE {p}_schema SET version = 4, compatible_from = 1 WHERE id = 1;
`,
	// 5 (ADR 0162): a release notice only for a name an acquire was
	// refused, and acquire_v3 in one routine. The lease row gets
	// waited, set by acquire_v4 on every name it refuses because a live
	// session holds it (under the row's lock, before its commit); release_v3
	// and close_v3 notify a freed name only when it is set; a grant of a
	// name that a release freed clears it (that release notified), a
	// takeover of an expired owner's name leaves it (the waiters before it
	// were not notified). acquire_v4 is acquire_v2's body and acquire_v3's
	// flush with every check of both, and no call of one routine from
	// another: it answers the tokens as one array, in the order of p_names
	// (0: held by a live session), a plain function rather than a
	// set-returning one. The version 3 and 4 routines stay for processes
	// not yet upgraded: their releases notify always, their refusals set
	// no mark (such a waiter finds the name on its next candidate tick).
	4: `
ALTER TABLE {p}_leases ADD COLUMN IF NOT EXISTS waited boolean NOT NULL DEFAULT false;

CREATE OR REPLACE FUNCTION {p}_acquire_v4(p_id text, p_names text[], p_quarantine_us bigint, p_wait_ms bigint)
RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_name   text;
    v_owner  text;
    v_token  bigint;
    v_held   boolean;
    v_waited boolean;
    v_alive  boolean;
    v_won    boolean := false;
    v_i      integer := 0;
    v_tokens bigint[] := '{}';
BEGIN
    -- Bounded lock waits, and at least a local WAL flush at commit (ADR
    -- 0160: raised only from off, for this transaction only), in one
    -- statement; CASE calls set_config only when the setting is off.
    PERFORM set_config('lock_timeout', p_wait_ms || 'ms', true),
            CASE WHEN current_setting('synchronous_commit') = 'off' THEN set_config('synchronous_commit', 'local', true) END;
    -- As acquire_v2 (see its comments and acquire_v1's): p_names sorted,
    -- lease rows locked in that order, and the session, the epoch row,
    -- both markers and the quarantine checked by the statement at the
    -- end, after every lock wait.
    FOREACH v_name IN ARRAY p_names LOOP
        v_i := v_i + 1;
        UPDATE {p}_leases l SET session_id = p_id, held = true, waited = false,
               token = greatest(l.token + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
         WHERE l.name = v_name AND NOT l.held
        RETURNING l.token INTO v_token;
        IF FOUND THEN
            v_won := true;
            v_tokens[v_i] := v_token;
            CONTINUE;
        END IF;
        INSERT INTO {p}_leases AS l (name, session_id, token, held)
        VALUES (v_name, p_id, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, true)
        ON CONFLICT (name) DO NOTHING
        RETURNING l.token INTO v_token;
        IF FOUND THEN
            v_won := true;
            v_tokens[v_i] := v_token;
            CONTINUE;
        END IF;
        SELECT l.session_id, l.token, l.held, l.waited INTO v_owner, v_token, v_held, v_waited
          FROM {p}_leases l WHERE l.name = v_name FOR UPDATE;
        IF v_held AND v_owner = p_id THEN
            v_tokens[v_i] := v_token;
            CONTINUE;
        END IF;
        v_alive := NULL;
        IF v_held THEN
            SELECT s.expires_at > clock_timestamp() INTO v_alive
              FROM {p}_sessions s WHERE s.id = v_owner;
            IF v_alive IS NOT TRUE THEN
                PERFORM 1 FROM {p}_sessions s WHERE s.id = v_owner FOR SHARE;
                SELECT s.expires_at > clock_timestamp() INTO v_alive
                  FROM {p}_sessions s WHERE s.id = v_owner;
            END IF;
        END IF;
        IF v_alive THEN
            -- Refused: mark the name waited for (the row is locked since
            -- the SELECT above), once per wait, so that the next release
            -- or close notifies.
            IF NOT v_waited THEN
                UPDATE {p}_leases l SET waited = true WHERE l.name = v_name;
            END IF;
            v_tokens[v_i] := 0;
        ELSE
            UPDATE {p}_leases l SET session_id = p_id, held = true,
                   token = greatest(l.token + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
             WHERE l.name = v_name
            RETURNING l.token INTO v_token;
            v_won := true;
            v_tokens[v_i] := v_token;
        END IF;
    END LOOP;
    IF v_won THEN
        UPDATE {p}_sessions s SET version = s.version + 1
         WHERE s.id = p_id AND s.expires_at > clock_timestamp()
           AND EXISTS (SELECT 1 FROM {p}_epoch qe JOIN {p}_sessions qs ON qs.id = '~epoch' JOIN {p}_leases ql ON ql.name = '~epoch' WHERE qe.id = 1 AND qe.quarantine_until <= clock_timestamp());
    ELSE
        PERFORM 1 FROM {p}_sessions s WHERE s.id = p_id AND s.expires_at > clock_timestamp()
           AND EXISTS (SELECT 1 FROM {p}_epoch qe JOIN {p}_sessions qs ON qs.id = '~epoch' JOIN {p}_leases ql ON ql.name = '~epoch' WHERE qe.id = 1 AND qe.quarantine_until <= clock_timestamp());
    END IF;
    IF NOT FOUND THEN
        PERFORM 1 FROM {p}_sessions s WHERE s.id = p_id AND s.expires_at > clock_timestamp();
        IF FOUND THEN
            RAISE EXCEPTION 'simba: namespace {p} lost its records or is quarantined' USING ERRCODE = 'SX002';
        END IF;
        RAISE EXCEPTION 'simba: session % expired or unknown', p_id USING ERRCODE = 'SX001';
    END IF;
    RETURN v_tokens;
END $$;

-- release_v3 is release_v2 whose notice names only what a refused
-- acquire marked (the mark stays: the next grant of the name clears it).
CREATE OR REPLACE FUNCTION {p}_release_v3(p_id text, p_names text[], p_tokens bigint[], p_wait_ms bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n      integer := 0;
    v_waited boolean;
BEGIN
    -- Both for this call's transaction only: no wait for the WAL flush
    -- (ADR 0034), and bounded lock waits.
    PERFORM set_config('synchronous_commit', 'off', true), set_config('lock_timeout', p_wait_ms || 'ms', true);
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        UPDATE {p}_leases l SET held = false
         WHERE l.name = p_names[i] AND l.token = p_tokens[i] AND l.session_id = p_id AND l.held
        RETURNING l.waited INTO v_waited;
        IF FOUND THEN
            v_n := v_n + 1;
            IF v_waited THEN
                PERFORM pg_notify('{p}_released', p_names[i]);
            END IF;
        END IF;
    END LOOP;
    IF v_n > 0 THEN
        UPDATE {p}_sessions s SET version = s.version + 1 WHERE s.id = p_id;
    END IF;
    RETURN v_n;
END $$;

-- close_v3 is close_v2 whose notices name only what a refused acquire
-- marked.
CREATE OR REPLACE FUNCTION {p}_close_v3(p_id text, p_wait_ms bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_name   text;
    v_waited boolean;
    v_n      integer := 0;
BEGIN
    PERFORM set_config('lock_timeout', p_wait_ms || 'ms', true);
    FOR v_name, v_waited IN SELECT l.name, l.waited FROM {p}_leases l WHERE l.session_id = p_id AND l.held
                   ORDER BY l.name FOR UPDATE LOOP
        UPDATE {p}_leases l SET held = false WHERE l.name = v_name;
        IF v_waited THEN
            PERFORM pg_notify('{p}_released', v_name);
        END IF;
        v_n := v_n + 1;
    END LOOP;
    DELETE FROM {p}_sessions s WHERE s.id = p_id;
    RETURN v_n;
END $$;

UPDATE {p}_schema SET version = 5, compatible_from = 1 WHERE id = 1;
`,
	// 6 (ADR 0170): every routine of the namespace resolves names in the
	// namespace's schema ({s}) only, whatever the caller's search_path: a
	// routine's body names its tables and the routines it calls
	// unqualified, which PostgreSQL resolves at each call by the
	// search_path in effect, so a pool whose search_path left the schema
	// out would run the routine on other tables of the same names, or
	// fail. A SET clause on the routine, not a change of its body, so
	// processes not yet upgraded (which find the routines by their own
	// search_path) run the same bodies, on the namespace's tables. The
	// clause restores only search_path on return: the routines'
	// set_config of lock_timeout and synchronous_commit for their
	// transaction stay in effect (ADR 0160). pg_temp last, so a temporary
	// table never shadows the namespace's.
	5: `
DO $simba$
DECLARE
    v_fn regprocedure;
BEGIN
    FOR v_fn IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
                 WHERE p.pronamespace = '"{s}"'::regnamespace AND p.proname = ANY (ARRAY[` + routineList + `])
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SET search_path = %I, pg_temp', v_fn, '{s}');
    END LOOP;
END $simba$;

UPDATE {p}_schema SET version = 6, compatible_from = 1 WHERE id = 1;
`,
	// 7 (ADR 0250, ADR 0251): no row per name, and the lock-delay. A
	// lease row lives only while its name is held: release_v4 and
	// close_v4 delete it, open_v5 sweeps the rows of expired sessions
	// (bounded), and a takeover reuses the row. Tokens rise per name
	// through <p>_marks, 1024 high-water marks (created here, never by a
	// grant), the name's bucket the first 10 bits of md5(name): a grant
	// locks its bucket, takes token = greatest(mark + 1, the clock in µs,
	// the row's token + 1 when a row is there) and raises the mark to it
	// in the same transaction. Names are handled in (bucket, name) order
	// everywhere, the bucket locked before its names' rows, so two
	// acquires never deadlock on marks. The marks start from every row's
	// token (the fold below), then released rows are deleted.
	//
	// The older routines would grant from per-name rows that no longer
	// outlive a release (an INSERT at the clock, below a mark), so they are
	// refused from now on: a trigger fails every write of theirs that grants
	// (SQLSTATE SX003, naming the upgrade), the new routines setting
	// simba.grants for their transaction; their releases, closes, opens,
	// renewals and waited marks still run, so their processes end their
	// terms cleanly. compatible_from 7: older code refuses to start.
	//
	// The lock-delay: a grant records its delay (delay_us); a name whose
	// owner's session expired without a release stays refused until the
	// database's clock passes the session's expiry + delay (ended_at, the
	// first look, when the session's row is gone: swept by older code).
	6: `
CREATE TABLE IF NOT EXISTS {p}_marks (
    bucket integer PRIMARY KEY CHECK (bucket BETWEEN 0 AND 1023),
    token  bigint  NOT NULL
);
INSERT INTO {p}_marks (bucket, token) SELECT b, 0 FROM generate_series(0, 1023) b
ON CONFLICT (bucket) DO NOTHING;

ALTER TABLE {p}_leases ADD COLUMN IF NOT EXISTS delay_us bigint NOT NULL DEFAULT 0;
ALTER TABLE {p}_leases ADD COLUMN IF NOT EXISTS ended_at timestamptz;

CREATE OR REPLACE FUNCTION {p}_refuse_v1() RETURNS trigger
LANGUAGE plpgsql SET search_path = "{s}", pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'simba: namespace {p} is at schema version 7, which keeps no row per name (ADR 0250): this process runs an older Simba, whose grants it refuses; upgrade it'
        USING ERRCODE = 'SX003';
END $$;

-- Taken with SHARE ROW EXCLUSIVE: writers in flight finish first, later
-- ones wait for this transaction's commit, after which the trigger
-- refuses the older routines' grants; so the fold sees every token.
DROP TRIGGER IF EXISTS {p}_leases_v7 ON {p}_leases;
CREATE TRIGGER {p}_leases_v7 BEFORE INSERT OR UPDATE OF token ON {p}_leases
FOR EACH ROW WHEN (NEW.held AND current_setting('simba.grants', true) IS DISTINCT FROM 'v7')
EXECUTE PROCEDURE {p}_refuse_v1();

UPDATE {p}_marks m SET token = greatest(m.token, f.token)
  FROM (SELECT ('x' || substr(md5(l.name), 1, 3))::bit(12)::integer >> 2 AS bucket, max(l.token) AS token
          FROM {p}_leases l WHERE l.name <> '~epoch' GROUP BY 1) f
 WHERE m.bucket = f.bucket;
DELETE FROM {p}_leases l WHERE NOT l.held AND l.name <> '~epoch';

CREATE OR REPLACE FUNCTION {p}_open_v5(p_id text, p_lease_us bigint, p_owner text, p_wait_ms bigint) RETURNS bigint
LANGUAGE plpgsql SET search_path = "{s}", pg_temp AS $$
DECLARE
    v_exp  timestamptz;
    v_ids  text[];
    v_name text;
BEGIN
    PERFORM set_config('lock_timeout', p_wait_ms || 'ms', true), -- bounded waits
            CASE WHEN current_setting('synchronous_commit') = 'off' THEN set_config('synchronous_commit', 'local', true) END;
    -- The sweep, bounded: up to 100 expired sessions that nobody is
    -- renewing or sweeping; their lease rows whose lock-delay has passed
    -- (skipping rows a candidate holds), then those of them left with no
    -- held lease. A session still in a lock-delay stays for a later open,
    -- and is not among the 100 (ADR 0285): 100 of them would take the
    -- sweep from every other for the length of their delay.
    SELECT array_agg(g.id) INTO v_ids FROM (
        SELECT s.id FROM {p}_sessions s WHERE s.expires_at < clock_timestamp()
           AND (NOT EXISTS (SELECT 1 FROM {p}_leases k WHERE k.session_id = s.id AND k.held)
                OR EXISTS (SELECT 1 FROM {p}_leases k WHERE k.session_id = s.id AND k.held
                              AND s.expires_at + k.delay_us * interval '1 microsecond' <= clock_timestamp()))
         LIMIT 100 FOR UPDATE SKIP LOCKED) g;
    IF v_ids IS NOT NULL THEN
        -- A swept name is free: one an acquire was refused is announced,
        -- as a release would (ADR 0162; a takeover would have kept the
        -- mark for the next holder's release, a sweep deletes it).
        FOR v_name IN
            WITH d AS (
                DELETE FROM {p}_leases l WHERE l.name IN (
                    SELECT k.name FROM {p}_leases k JOIN {p}_sessions ks ON ks.id = k.session_id
                     WHERE k.session_id = ANY (v_ids) AND k.held
                       AND ks.expires_at + k.delay_us * interval '1 microsecond' <= clock_timestamp()
                       FOR UPDATE OF k SKIP LOCKED)
                RETURNING l.name, l.waited)
            SELECT d.name FROM d WHERE d.waited
        LOOP
            PERFORM pg_notify('{p}_released', v_name);
        END LOOP;
        DELETE FROM {p}_sessions s WHERE s.id = ANY (v_ids)
           AND NOT EXISTS (SELECT 1 FROM {p}_leases l WHERE l.session_id = s.id AND l.held);
    END IF;
    INSERT INTO {p}_sessions AS s (id, expires_at, lease, version, owner)
    VALUES (p_id, clock_timestamp() + p_lease_us * interval '1 microsecond',
            p_lease_us * interval '1 microsecond', 1, nullif(p_owner, ''))
    RETURNING s.expires_at INTO v_exp;
    RETURN (extract(epoch FROM v_exp - clock_timestamp()) * 1000000)::bigint;
END $$;

-- acquire_v5 is acquire_v4 over marks (see above): the tokens as one
-- array in the order of p_names (0: held by a live session, or waiting
-- out a lock-delay); SQLSTATE SX001 (session expired) and SX002 (records
-- lost, quarantined, or a mark missing) roll back all it did.
CREATE OR REPLACE FUNCTION {p}_acquire_v5(p_id text, p_names text[], p_quarantine_us bigint, p_wait_ms bigint, p_delay_us bigint)
RETURNS bigint[]
LANGUAGE plpgsql SET search_path = "{s}", pg_temp AS $$
DECLARE
    v_i      bigint;
    v_name   text;
    v_b      integer;
    v_lastb  integer := -1;
    v_mark   bigint;
    v_owner  text;
    v_token  bigint;
    v_held   boolean;
    v_waited boolean;
    v_delay  bigint;
    v_ended  timestamptz;
    v_end    timestamptz;
    v_alive  boolean;
    v_grant  boolean;
    v_won    boolean := false;
    v_tokens bigint[] := '{}';
BEGIN
    PERFORM set_config('lock_timeout', p_wait_ms || 'ms', true), set_config('simba.grants', 'v7', true),
            CASE WHEN current_setting('synchronous_commit') = 'off' THEN set_config('synchronous_commit', 'local', true) END;
    FOR v_i, v_name, v_b IN
        SELECT n.i, n.name, ('x' || substr(md5(n.name), 1, 3))::bit(12)::integer >> 2
          FROM unnest(p_names) WITH ORDINALITY AS n(name, i) ORDER BY 3, n.name COLLATE "C"
    LOOP
        IF v_b <> v_lastb THEN
            -- The bucket first, then its names' rows: one order for all.
            SELECT m.token INTO v_mark FROM {p}_marks m WHERE m.bucket = v_b FOR UPDATE;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'simba: namespace {p} lost its records or is quarantined' USING ERRCODE = 'SX002';
            END IF;
            v_lastb := v_b;
        END IF;
        v_grant := false;
        SELECT l.session_id, l.token, l.held, l.waited, l.delay_us, l.ended_at
          INTO v_owner, v_token, v_held, v_waited, v_delay, v_ended
          FROM {p}_leases l WHERE l.name = v_name FOR UPDATE;
        IF NOT FOUND THEN
            -- Free: no row. Any other grant of the name would need the
            -- bucket's lock, which this transaction holds.
            v_token := greatest(v_mark + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
            INSERT INTO {p}_leases (name, session_id, token, held, delay_us)
            VALUES (v_name, p_id, v_token, true, p_delay_us);
            v_grant := true;
        ELSIF v_held AND v_owner = p_id THEN
            NULL; -- already ours: the token it is owned under
        ELSE
            v_alive := NULL;
            v_end := NULL;
            IF v_held THEN
                SELECT s.expires_at > clock_timestamp(), s.expires_at INTO v_alive, v_end
                  FROM {p}_sessions s WHERE s.id = v_owner;
                IF v_alive IS NOT TRUE THEN
                    -- A renewal may be in flight (see acquire_v1).
                    PERFORM 1 FROM {p}_sessions s WHERE s.id = v_owner FOR SHARE;
                    SELECT s.expires_at > clock_timestamp(), s.expires_at INTO v_alive, v_end
                      FROM {p}_sessions s WHERE s.id = v_owner;
                END IF;
                IF v_alive IS NOT TRUE AND v_delay > 0 THEN
                    -- The owner's session ended without a release: the
                    -- name waits out its lock-delay from the session's
                    -- expiry, or, the row gone, from the first look.
                    IF v_end IS NULL THEN
                        IF v_ended IS NULL THEN
                            v_ended := clock_timestamp();
                            UPDATE {p}_leases l SET ended_at = v_ended WHERE l.name = v_name;
                        END IF;
                        v_end := v_ended;
                    END IF;
                    IF clock_timestamp() < v_end + v_delay * interval '1 microsecond' THEN
                        v_alive := true;
                    END IF;
                END IF;
            END IF;
            IF v_alive THEN
                -- Refused: mark the name waited for (ADR 0162).
                IF NOT v_waited THEN
                    UPDATE {p}_leases l SET waited = true WHERE l.name = v_name;
                END IF;
                v_token := 0;
            ELSIF v_held THEN
                -- A takeover: the mark stays (its waiters were not notified).
                v_token := greatest(v_token + 1, v_mark + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
                UPDATE {p}_leases l SET session_id = p_id, token = v_token, delay_us = p_delay_us, ended_at = NULL
                 WHERE l.name = v_name;
                v_grant := true;
            ELSE
                -- A row an older process's release left: as a release
                -- that notified, the mark goes.
                v_token := greatest(v_token + 1, v_mark + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
                UPDATE {p}_leases l SET session_id = p_id, held = true, waited = false, token = v_token, delay_us = p_delay_us, ended_at = NULL
                 WHERE l.name = v_name;
                v_grant := true;
            END IF;
        END IF;
        IF v_grant THEN
            UPDATE {p}_marks m SET token = v_token WHERE m.bucket = v_b;
            v_mark := v_token;
            v_won := true;
        END IF;
        v_tokens[v_i] := v_token;
    END LOOP;
    IF v_won THEN
        UPDATE {p}_sessions s SET version = s.version + 1
         WHERE s.id = p_id AND s.expires_at > clock_timestamp()
           AND EXISTS (SELECT 1 FROM {p}_epoch ke JOIN {p}_sessions ks ON ks.id = '~epoch' JOIN {p}_leases kl ON kl.name = '~epoch' WHERE ke.id = 1 AND ke.quarantine_until <= clock_timestamp());
    ELSE
        PERFORM 1 FROM {p}_sessions s WHERE s.id = p_id AND s.expires_at > clock_timestamp()
           AND EXISTS (SELECT 1 FROM {p}_epoch ke JOIN {p}_sessions ks ON ks.id = '~epoch' JOIN {p}_leases kl ON kl.name = '~epoch' WHERE ke.id = 1 AND ke.quarantine_until <= clock_timestamp());
    END IF;
    IF NOT FOUND THEN
        PERFORM 1 FROM {p}_sessions s WHERE s.id = p_id AND s.expires_at > clock_timestamp();
        IF FOUND THEN
            RAISE EXCEPTION 'simba: namespace {p} lost its records or is quarantined' USING ERRCODE = 'SX002';
        END IF;
        RAISE EXCEPTION 'simba: session % expired or unknown', p_id USING ERRCODE = 'SX001';
    END IF;
    RETURN v_tokens;
END $$;

-- epoch_v3 is epoch_v2 that also finds missing marks: it puts them back
-- (at 0) and quarantines, so that tokens start again from the clock
-- after every term granted before the loss has ended.
CREATE OR REPLACE FUNCTION {p}_epoch_v3(p_quarantine_us bigint, p_wait_ms bigint) RETURNS bigint
LANGUAGE plpgsql SET search_path = "{s}", pg_temp AS $$
DECLARE
    v_left  bigint;
    v_until timestamptz;
BEGIN
    PERFORM set_config('lock_timeout', p_wait_ms || 'ms', true), -- as epoch_v2
            CASE WHEN current_setting('synchronous_commit') = 'off' THEN set_config('synchronous_commit', 'local', true) END;
    -- epoch_v1 takes the epoch table's lock, held to the commit, so the
    -- finders of lost marks take turns too.
    v_left := {p}_epoch_v1(p_quarantine_us, p_wait_ms);
    IF (SELECT count(*) FROM {p}_marks) < 1024 THEN
        INSERT INTO {p}_marks (bucket, token) SELECT b, 0 FROM generate_series(0, 1023) b
        ON CONFLICT (bucket) DO NOTHING;
        UPDATE {p}_epoch e SET quarantine_until = greatest(e.quarantine_until, clock_timestamp() + p_quarantine_us * interval '1 microsecond')
         WHERE e.id = 1
        RETURNING e.quarantine_until INTO v_until;
        v_left := greatest(0, ceil(extract(epoch FROM v_until - clock_timestamp()) * 1000000))::bigint;
    END IF;
    RETURN v_left;
END $$;

-- release_v4 deletes each released lease's row; the name's notice as
-- release_v3's (only when an acquire was refused it). A lease with a
-- lock-delay whose session has expired stays (ADR 0285): its term ended
-- at the expiry, and the delay it owes from then is not cut short by a
-- release that comes after (the paused holder woke up). Whether the
-- session lives is read once its rows with a delay are locked, under the
-- session row's lock (rows first, the session row last, as everywhere):
-- read before (an EXISTS in each DELETE, evaluated before the DELETE
-- waited for the row that another session's acquire held), it went stale
-- when the session expired during the wait, and the row went inside its
-- delay; read without the lock, a renewal committing meanwhile went
-- unseen and the row stayed, held by a live session that released it.
CREATE OR REPLACE FUNCTION {p}_release_v4(p_id text, p_names text[], p_tokens bigint[], p_wait_ms bigint)
RETURNS integer
LANGUAGE plpgsql SET search_path = "{s}", pg_temp AS $$
DECLARE
    v_n       integer := 0;
    v_name    text;
    v_token   bigint;
    v_delay   bigint;
    v_waited  boolean;
    v_delayed text[] := '{}';
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true), set_config('lock_timeout', p_wait_ms || 'ms', true);
    FOR v_name, v_token IN
        SELECT n.name, n.token FROM unnest(p_names, p_tokens) AS n(name, token)
         ORDER BY ('x' || substr(md5(n.name), 1, 3))::bit(12)::integer >> 2, n.name COLLATE "C"
    LOOP
        SELECT l.delay_us INTO v_delay FROM {p}_leases l
         WHERE l.name = v_name AND l.token = v_token AND l.session_id = p_id AND l.held FOR UPDATE;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        IF v_delay > 0 THEN
            v_delayed := v_delayed || v_name; -- locked; goes below if the session lives
            CONTINUE;
        END IF;
        DELETE FROM {p}_leases l WHERE l.name = v_name RETURNING l.waited INTO v_waited;
        v_n := v_n + 1;
        IF v_waited THEN
            PERFORM pg_notify('{p}_released', v_name);
        END IF;
    END LOOP;
    IF cardinality(v_delayed) > 0 THEN
        PERFORM 1 FROM {p}_sessions s WHERE s.id = p_id FOR UPDATE;
        IF EXISTS (SELECT 1 FROM {p}_sessions s WHERE s.id = p_id AND s.expires_at > clock_timestamp()) THEN
            FOREACH v_name IN ARRAY v_delayed LOOP
                DELETE FROM {p}_leases l WHERE l.name = v_name RETURNING l.waited INTO v_waited;
                v_n := v_n + 1;
                IF v_waited THEN
                    PERFORM pg_notify('{p}_released', v_name);
                END IF;
            END LOOP;
        END IF;
    END IF;
    IF v_n > 0 THEN
        UPDATE {p}_sessions s SET version = s.version + 1 WHERE s.id = p_id;
    END IF;
    RETURN v_n;
END $$;

-- close_v4 deletes the session's lease rows and its row. Once the
-- session has expired, its leases with a lock-delay stay, and the
-- session's row with them (ADR 0285): the delay counts from its expiry,
-- and open_v5's sweep deletes both after it (a close that comes after
-- the expiry is the paused holder's engine waking up).
CREATE OR REPLACE FUNCTION {p}_close_v4(p_id text, p_wait_ms bigint) RETURNS integer
LANGUAGE plpgsql SET search_path = "{s}", pg_temp AS $$
DECLARE
    v_name   text;
    v_waited boolean;
    v_delay  bigint;
    v_over   boolean;
    v_kept   boolean := false;
    v_n      integer := 0;
BEGIN
    PERFORM set_config('lock_timeout', p_wait_ms || 'ms', true);
    -- Whether the session lives is read once its rows are locked, under
    -- the session row's lock, as in release_v4: read first, it went stale
    -- while the close waited for a row (another session's acquire held it)
    -- and the session expired meanwhile.
    PERFORM 1 FROM {p}_leases l WHERE l.session_id = p_id AND l.held
      ORDER BY ('x' || substr(md5(l.name), 1, 3))::bit(12)::integer >> 2, l.name COLLATE "C" FOR UPDATE;
    PERFORM 1 FROM {p}_sessions s WHERE s.id = p_id FOR UPDATE;
    v_over := NOT EXISTS (SELECT 1 FROM {p}_sessions s WHERE s.id = p_id AND s.expires_at > clock_timestamp());
    FOR v_name, v_waited, v_delay IN
        SELECT l.name, l.waited, l.delay_us FROM {p}_leases l WHERE l.session_id = p_id AND l.held -- locked above
    LOOP
        IF v_over AND v_delay > 0 THEN
            v_kept := true; -- ended by the expiry: its delay stands
            CONTINUE;
        END IF;
        DELETE FROM {p}_leases l WHERE l.name = v_name;
        IF v_waited THEN -- an acquire was refused it
            PERFORM pg_notify('{p}_released', v_name);
        END IF;
        v_n := v_n + 1;
    END LOOP;
    IF NOT v_kept THEN
        DELETE FROM {p}_sessions s WHERE s.id = p_id;
    END IF;
    RETURN v_n;
END $$;

UPDATE {p}_schema SET version = 7, compatible_from = 7 WHERE id = 1;
`,
}

// routineList is every routine's name of the namespace, as SQL literals.
var routineList = func() string {
	var l []string
	for _, r := range ourRoutines {
		l = append(l, "'{p}"+r+"'")
	}
	return strings.Join(l, ", ")
}()

// initEpoch ends the creation of a new namespace (Migration from 0), in
// its transaction: tables that did not exist held no leases, so the new
// namespace starts with no quarantine (ADR 0130). Never part of a
// migration of existing tables, which may have been restored from a
// backup. (The markers come with migration 2.)
const initEpoch = `
INSERT INTO {p}_epoch (id, quarantine_until) VALUES (1, clock_timestamp())
ON CONFLICT (id) DO NOTHING;
`
