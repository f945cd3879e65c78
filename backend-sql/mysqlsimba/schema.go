package mysqlsimba

// schema is the namespace's tables and procedures, one statement each (the
// driver sends statements one at a time, so no DELIMITER is needed). "{p}"
// is the validated table prefix (core.Expand); nothing else is interpolated.
// Every statement is idempotent, and they run under GET_LOCK so that many
// processes may start at once.
//
// Time is UTC_TIMESTAMP(6): microseconds, independent of the connection's
// time_zone, and, inside a procedure, read afresh by each statement, so a
// statement that follows a lock wait sees the time after the wait (NOW()
// in a stored function would be frozen at the call). expires_at holds UTC.
//
// Every parameter and variable that meets a column is declared ascii_bin
// like the column: with the server's default collation, MySQL would
// compare case-insensitively and could not use the primary key.
//
// A lease is owned by session_id only while held = 1. Release clears held
// and keeps session_id and token, so releasing, and a session taking back a
// name it held before, change no indexed column.
//
// Each procedure runs its own READ COMMITTED transaction, so every read
// sees the latest commit, like PostgreSQL's default. Procedures are
// suffixed _v1 so that a later release can add _v2 beside them.
//
// schema is version 1, the first schema, which recorded no version; it is
// never changed. Later versions are migrations (migrations[n] brings
// version n to n+1), which add procedures beside the old ones and never
// change an installed body (docs/adr/0081-sql-schema-versions.md).
var schema = []string{`
CREATE TABLE IF NOT EXISTS {p}_sessions (
    id         CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    expires_at DATETIME(6) NOT NULL,
    lease_us   BIGINT NOT NULL,
    version    BIGINT NOT NULL
) ENGINE=InnoDB`, `
CREATE TABLE IF NOT EXISTS {p}_leases (
    name       VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    session_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL,
    token      BIGINT NOT NULL,
    held       TINYINT NOT NULL,
    KEY session_idx (session_id)
) ENGINE=InnoDB`, `
CREATE PROCEDURE IF NOT EXISTS {p}_open_v1(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_lease_us BIGINT)
BEGIN
    DECLARE v_exp DATETIME(6);
    -- An expired session answers "expired" whether or not its row exists,
    -- so expired rows may go, a few per open. READ COMMITTED: the scan
    -- keeps no lock on the live rows it passes.
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    DELETE FROM {p}_sessions WHERE expires_at < UTC_TIMESTAMP(6) LIMIT 100;
    SET v_exp = UTC_TIMESTAMP(6) + INTERVAL p_lease_us MICROSECOND;
    INSERT INTO {p}_sessions (id, expires_at, lease_us, version) VALUES (p_id, v_exp, p_lease_us, 1);
    SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_exp) AS remaining_us;
END`, `
CREATE PROCEDURE IF NOT EXISTS {p}_renew_v1(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_known BIGINT)
BEGIN
    DECLARE v_exp DATETIME(6) DEFAULT NULL;
    DECLARE v_lease BIGINT;
    DECLARE v_ver BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    -- Lock, then read the clock: a renewal that waited for the lock judges
    -- expiry by the time it got it, so it never revives a session that
    -- expired meanwhile (and lost its leases to others).
    SELECT expires_at, lease_us, version INTO v_exp, v_lease, v_ver
      FROM {p}_sessions WHERE id = p_id FOR UPDATE;
    IF v_exp IS NULL OR v_exp <= UTC_TIMESTAMP(6) THEN
        COMMIT;
        SELECT NULL AS remaining_us, NULL AS version, NULL AS name, NULL AS token FROM DUAL WHERE FALSE;
    ELSE
        SET v_exp = UTC_TIMESTAMP(6) + INTERVAL v_lease MICROSECOND;
        UPDATE {p}_sessions SET expires_at = v_exp WHERE id = p_id;
        IF v_ver = p_known THEN
            SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_exp) AS remaining_us,
                   v_ver AS version, NULL AS name, NULL AS token;
        ELSE
            -- Acquire and release change the version last, under this
            -- row's lock, which this transaction holds: the list matches.
            SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_exp) AS remaining_us,
                   v_ver AS version, NULL AS name, NULL AS token
            UNION ALL
            SELECT NULL, NULL, l.name, l.token FROM {p}_leases l WHERE l.session_id = p_id AND l.held = 1;
        END IF;
        COMMIT;
    END IF;
END`, `
CREATE PROCEDURE IF NOT EXISTS {p}_acquire_v1(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_names LONGTEXT CHARACTER SET ascii COLLATE ascii_bin)
BEGIN
    DECLARE v_pos BIGINT DEFAULT 1;
    DECLARE v_end BIGINT;
    DECLARE v_name VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_owner CHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_token BIGINT;
    DECLARE v_alive INT;
    DECLARE v_won INT DEFAULT 0;
    DECLARE v_new INT;
    DECLARE v_held INT;
    DECLARE v_out LONGTEXT CHARACTER SET ascii COLLATE ascii_bin DEFAULT '';
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    -- Whether the session is alive is checked at the end, once, by the
    -- statement that must run anyway (or by a read if nothing was won); an
    -- expired session's attempt is rolled back and answers no row.
    -- p_names is sorted and comma-separated (names cannot hold a
    -- comma), so concurrent calls lock lease rows in one order.
    WHILE v_pos <= CHAR_LENGTH(p_names) DO
        SET v_end = LOCATE(',', p_names, v_pos);
        IF v_end = 0 THEN
            SET v_end = CHAR_LENGTH(p_names) + 1;
        END IF;
        SET v_name = SUBSTRING(p_names, v_pos, v_end - v_pos);
        SET v_pos = v_end + 1;
        SET v_owner = NULL, v_token = NULL, v_held = 0, v_new = 0;
        -- Fast path: a released lease (its row kept, not held) is taken in
        -- one statement; LAST_INSERT_ID(expr) hands the new token back
        -- without reading the row again. (It only sets this connection's
        -- LAST_INSERT_ID(), which Simba's calls never read otherwise.)
        UPDATE {p}_leases SET session_id = p_id, held = 1,
               token = LAST_INSERT_ID(GREATEST(token + 1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))))
         WHERE name = v_name AND held = 0;
        IF ROW_COUNT() = 1 THEN
            SET v_token = LAST_INSERT_ID(), v_new = 1, v_won = 1;
        ELSE
            SELECT session_id, token, held INTO v_owner, v_token, v_held FROM {p}_leases WHERE name = v_name FOR UPDATE;
        END IF;
        IF v_new = 0 AND v_token IS NULL THEN
            -- A new name starts at the clock in microseconds, so tokens
            -- keep rising even if the table was emptied (ADR 0031).
            -- ON DUPLICATE KEY: another call may insert it first.
            INSERT INTO {p}_leases (name, session_id, token, held)
            VALUES (v_name, p_id, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)), 1)
            ON DUPLICATE KEY UPDATE token = token;
            SELECT session_id, token, held INTO v_owner, v_token, v_held FROM {p}_leases WHERE name = v_name FOR UPDATE;
            IF v_owner = p_id AND v_held = 1 THEN
                SET v_new = 1, v_won = 1;
            END IF;
        END IF;
        IF v_new = 0 AND NOT (v_held = 1 AND v_owner <=> p_id) THEN
            SET v_alive = 0;
            IF v_held = 1 THEN
                SELECT COUNT(*) INTO v_alive FROM {p}_sessions
                 WHERE id = v_owner AND expires_at > UTC_TIMESTAMP(6);
                IF v_alive = 0 THEN
                    -- Looks expired. A renewal may be in flight: its
                    -- row lock conflicts with this share lock, so wait
                    -- for it and look again. (Only here: locking live
                    -- owners would let two candidates deadlock.)
                    SELECT COUNT(*) INTO v_alive FROM {p}_sessions WHERE id = v_owner LOCK IN SHARE MODE;
                    SELECT COUNT(*) INTO v_alive FROM {p}_sessions
                     WHERE id = v_owner AND expires_at > UTC_TIMESTAMP(6);
                END IF;
            END IF;
            IF v_alive = 0 THEN
                -- v_token is the row's, read under its lock above.
                SET v_token = GREATEST(v_token + 1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)));
                UPDATE {p}_leases SET session_id = p_id, held = 1, token = v_token WHERE name = v_name;
                SET v_won = 1;
            ELSE
                SET v_token = 0;
            END IF;
        END IF;
        SET v_out = CONCAT(v_out, IF(v_out = '', '', ','), v_token);
    END WHILE;
    IF v_won = 1 THEN
        UPDATE {p}_sessions SET version = version + 1
         WHERE id = p_id AND expires_at > UTC_TIMESTAMP(6);
        SET v_alive = ROW_COUNT();
    ELSE
        SELECT COUNT(*) INTO v_alive FROM {p}_sessions WHERE id = p_id AND expires_at > UTC_TIMESTAMP(6);
    END IF;
    IF v_alive = 0 THEN
        ROLLBACK;
        SELECT NULL AS tokens FROM DUAL WHERE FALSE;
    ELSE
        COMMIT;
        SELECT v_out AS tokens;
    END IF;
END`, `
CREATE PROCEDURE IF NOT EXISTS {p}_release_v1(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_names LONGTEXT CHARACTER SET ascii COLLATE ascii_bin, IN p_tokens LONGTEXT CHARACTER SET ascii COLLATE ascii_bin)
BEGIN
    DECLARE v_pos BIGINT DEFAULT 1;
    DECLARE v_tpos BIGINT DEFAULT 1;
    DECLARE v_end BIGINT;
    DECLARE v_tend BIGINT;
    DECLARE v_name VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_token BIGINT;
    DECLARE v_n INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    IF p_names <> '' AND LOCATE(',', p_names) = 0 THEN
        -- One lease, the usual case: no list to walk (cheaper by about
        -- 15 µs on MariaDB, docs/bench/backend-sql.md).
        SET v_name = p_names, v_token = CAST(p_tokens AS SIGNED);
        UPDATE {p}_leases SET held = 0
         WHERE name = v_name AND token = v_token AND session_id = p_id AND held = 1;
        SET v_n = ROW_COUNT();
        SET v_pos = CHAR_LENGTH(p_names) + 1; -- the loop below has nothing left
    END IF;
    WHILE v_pos <= CHAR_LENGTH(p_names) DO
        SET v_end = LOCATE(',', p_names, v_pos);
        IF v_end = 0 THEN
            SET v_end = CHAR_LENGTH(p_names) + 1;
        END IF;
        SET v_tend = LOCATE(',', p_tokens, v_tpos);
        IF v_tend = 0 THEN
            SET v_tend = CHAR_LENGTH(p_tokens) + 1;
        END IF;
        SET v_name = SUBSTRING(p_names, v_pos, v_end - v_pos);
        SET v_token = CAST(SUBSTRING(p_tokens, v_tpos, v_tend - v_tpos) AS SIGNED);
        SET v_pos = v_end + 1, v_tpos = v_tend + 1;
        -- The row and its token are kept: the next term counts up from it.
        UPDATE {p}_leases SET held = 0
         WHERE name = v_name AND token = v_token AND session_id = p_id AND held = 1;
        SET v_n = v_n + ROW_COUNT();
    END WHILE;
    IF v_n > 0 THEN
        UPDATE {p}_sessions SET version = version + 1 WHERE id = p_id;
    END IF;
    COMMIT;
END`, `
CREATE PROCEDURE IF NOT EXISTS {p}_close_v1(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin)
BEGIN
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    -- Through the session index, rows come (and are locked) in name order.
    UPDATE {p}_leases SET held = 0 WHERE session_id = p_id AND held = 1 ORDER BY name;
    DELETE FROM {p}_sessions WHERE id = p_id;
    COMMIT;
END`,
}

// migrations[n] brings a namespace from schema version n to n+1. MySQL's
// DDL is not transactional, so each step is safe to run again after a
// step failed half way (migrate skips a column that exists), and the
// version is recorded last.
var migrations = map[int][]string{
	// 2: the sessions' owner (identity and metadata as JSON, NULL from
	// version 1 procedures), <p>_open_v2 that stores it, and <p>_schema
	// that records the version. Version 1 code keeps running on it.
	1: {`
ALTER TABLE {p}_sessions ADD COLUMN owner TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL`, `
CREATE PROCEDURE IF NOT EXISTS {p}_open_v2(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_lease_us BIGINT, IN p_owner TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
BEGIN
    DECLARE v_exp DATETIME(6);
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    DELETE FROM {p}_sessions WHERE expires_at < UTC_TIMESTAMP(6) LIMIT 100;
    SET v_exp = UTC_TIMESTAMP(6) + INTERVAL p_lease_us MICROSECOND;
    INSERT INTO {p}_sessions (id, expires_at, lease_us, version, owner) VALUES (p_id, v_exp, p_lease_us, 1, NULLIF(p_owner, ''));
    SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_exp) AS remaining_us;
END`, `
CREATE TABLE IF NOT EXISTS {p}_schema (
    id              INT NOT NULL PRIMARY KEY,
    version         INT NOT NULL,
    compatible_from INT NOT NULL
) ENGINE=InnoDB`, `
INSERT INTO {p}_schema (id, version, compatible_from) VALUES (1, 2, 1)
ON DUPLICATE KEY UPDATE version = VALUES(version), compatible_from = VALUES(compatible_from)`},
	// 3 (ADR 0130, ADR 0135): the namespace's epoch row, which the
	// acquire procedure checks in the transaction that grants, and whose
	// absence (the tables emptied, a restore from a backup without it)
	// starts a quarantine of one maximum lease; and every procedure bounds
	// its lock waits (innodb_lock_wait_timeout, whole seconds, set for the
	// call and restored before it returns). The _v1 procedures stay for
	// processes not yet upgraded; they neither check the epoch nor bound
	// their waits.
	//
	// Detection needs a mark in every table that can lose its rows: the
	// epoch row, and a marker row '~epoch' in <p>_sessions and in
	// <p>_leases (never a session id nor a lease name: neither is valid;
	// the session marker never expires, so no open procedure collects
	// it). Tables emptied one after the other (TRUNCATE a; TRUNCATE b)
	// would otherwise leave a window in which sessions are gone, leases
	// look free and the epoch row is still there.
	//
	// The migration creates the markers (they mark these tables from now
	// on) but leaves the epoch table empty: tables that already existed
	// may have just been restored from an old backup, so the first acquire
	// after it quarantines (once, for one maximum lease). Only the
	// creation of a new namespace (Migration from 0) writes the epoch row.
	//
	// Lock waits: innodb_lock_wait_timeout counts whole seconds, so the
	// caller's bound in milliseconds is rounded down (at or below the
	// caller's deadline, hence at or below the engine's renewal period),
	// but to no less than 1 s (0 would refuse every wait, also the short
	// one for a renewal in flight). The connection's own value is saved
	// and restored, also on error: the pool is the user's.
	2: {`
CREATE TABLE IF NOT EXISTS {p}_epoch (
    id               INT NOT NULL PRIMARY KEY,
    quarantine_until DATETIME(6) NOT NULL
) ENGINE=InnoDB`, `
INSERT INTO {p}_sessions (id, expires_at, lease_us, version) VALUES ('~epoch', '9999-12-31 23:59:59.999999', 0, 0)
ON DUPLICATE KEY UPDATE id = id`, `
INSERT INTO {p}_leases (name, session_id, token, held) VALUES ('~epoch', NULL, 0, 0)
ON DUPLICATE KEY UPDATE name = name`, `
ALTER TABLE {p}_sessions ADD COLUMN quarantine_until DATETIME(6) NULL`, `
CREATE PROCEDURE IF NOT EXISTS {p}_lost_v1(IN p_quarantine_us BIGINT, OUT p_until DATETIME(6))
BEGIN
    -- Notes a loss of the namespace's records, in the caller's
    -- transaction: a missing epoch row or marker. A term granted before
    -- the loss lasted at most one maximum lease, so none is granted until
    -- that long after now; every session learns it on its own row, where
    -- acquire looks (no other table is read on acquire's usual path).
    -- Finders take turns on the schema row (always there; Open holds it
    -- shared while it reads the epoch), so a later one sees what an
    -- earlier one put back and never pushes the same quarantine on.
    -- Answers the quarantine's end (in the past: none).
    DECLARE v_lost INT DEFAULT 0;
    DECLARE v_n INT;
    SET p_until = NULL;
    SELECT COUNT(*) INTO v_n FROM {p}_schema WHERE id = 1 FOR UPDATE;
    SELECT quarantine_until INTO p_until FROM {p}_epoch WHERE id = 1;
    IF NOT EXISTS (SELECT 1 FROM {p}_leases WHERE name = '~epoch') THEN
        -- The leases lost their rows while sessions may live on, each
        -- believing its version still says what it owns: a new version
        -- makes each one's next renewal list what it owns now (nothing
        -- lost), so its engine ends those terms.
        UPDATE {p}_sessions SET version = version + 1 WHERE id <> '~epoch';
        INSERT INTO {p}_leases (name, session_id, token, held) VALUES ('~epoch', NULL, 0, 0)
        ON DUPLICATE KEY UPDATE name = name;
        SET v_lost = 1;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM {p}_sessions WHERE id = '~epoch') THEN
        INSERT INTO {p}_sessions (id, expires_at, lease_us, version) VALUES ('~epoch', '9999-12-31 23:59:59.999999', 0, 0)
        ON DUPLICATE KEY UPDATE id = id;
        SET v_lost = 1;
    END IF;
    IF p_until IS NULL OR v_lost = 1 THEN
        SET p_until = GREATEST(COALESCE(p_until, '1970-01-01'), UTC_TIMESTAMP(6) + INTERVAL p_quarantine_us MICROSECOND);
        INSERT INTO {p}_epoch (id, quarantine_until) VALUES (1, p_until)
        ON DUPLICATE KEY UPDATE quarantine_until = VALUES(quarantine_until);
        UPDATE {p}_sessions SET quarantine_until = p_until WHERE id <> '~epoch';
    END IF;
END`, `
CREATE PROCEDURE IF NOT EXISTS {p}_open_v3(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_lease_us BIGINT, IN p_owner TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, IN p_quarantine_us BIGINT, IN p_wait_ms BIGINT)
BEGIN
    DECLARE v_exp DATETIME(6);
    DECLARE v_until DATETIME(6) DEFAULT NULL;
    DECLARE v_n INT;
    DECLARE v_lwt BIGINT DEFAULT 50;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; SET SESSION innodb_lock_wait_timeout = v_lwt; RESIGNAL; END;
    SET v_lwt = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = GREATEST(1, p_wait_ms DIV 1000);
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    DELETE FROM {p}_sessions WHERE expires_at < UTC_TIMESTAMP(6) LIMIT 100;
    -- The new session carries the namespace's quarantine, if any, on its
    -- row (acquire reads it there). The schema row is held shared so
    -- that a loss noted meanwhile (lost_v1 holds it exclusively, then
    -- marks every session row) cannot miss this one; a loss not yet
    -- noted is noted here.
    SELECT COUNT(*) INTO v_n FROM {p}_schema WHERE id = 1 LOCK IN SHARE MODE;
    SELECT quarantine_until INTO v_until FROM {p}_epoch WHERE id = 1;
    IF v_until IS NULL OR NOT EXISTS (SELECT 1 FROM {p}_leases WHERE name = '~epoch')
       OR NOT EXISTS (SELECT 1 FROM {p}_sessions WHERE id = '~epoch') THEN
        CALL {p}_lost_v1(p_quarantine_us, v_until);
    END IF;
    SET v_exp = UTC_TIMESTAMP(6) + INTERVAL p_lease_us MICROSECOND;
    INSERT INTO {p}_sessions (id, expires_at, lease_us, version, owner, quarantine_until)
    VALUES (p_id, v_exp, p_lease_us, 1, NULLIF(p_owner, ''), IF(v_until > UTC_TIMESTAMP(6), v_until, NULL));
    COMMIT;
    SET SESSION innodb_lock_wait_timeout = v_lwt;
    SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_exp) AS remaining_us;
END`, `
CREATE PROCEDURE IF NOT EXISTS {p}_renew_v2(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_known BIGINT, IN p_quarantine_us BIGINT, IN p_wait_ms BIGINT)
BEGIN
    DECLARE v_exp DATETIME(6) DEFAULT NULL;
    DECLARE v_lease BIGINT;
    DECLARE v_ver BIGINT;
    DECLARE v_lwt BIGINT DEFAULT 50;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; SET SESSION innodb_lock_wait_timeout = v_lwt; RESIGNAL; END;
    SET v_lwt = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = GREATEST(1, p_wait_ms DIV 1000);
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    -- A loss of the namespace's records is noted here too (the first
    -- renewal after it, of any session), so that a restore of older rows
    -- whose epoch row went missing is noticed within a renewal period
    -- even if no session opens, and no acquire takes a new name or takes
    -- a lease over. Before this session's row is locked: lost_v1 locks
    -- the schema row, then every session row.
    IF NOT EXISTS (SELECT 1 FROM {p}_epoch WHERE id = 1) OR NOT EXISTS (SELECT 1 FROM {p}_leases WHERE name = '~epoch')
       OR NOT EXISTS (SELECT 1 FROM {p}_sessions WHERE id = '~epoch') THEN
        CALL {p}_lost_v1(p_quarantine_us, v_exp);
        SET v_exp = NULL;
    END IF;
    -- Lock, then read the clock (see renew_v1).
    SELECT expires_at, lease_us, version INTO v_exp, v_lease, v_ver
      FROM {p}_sessions WHERE id = p_id FOR UPDATE;
    IF v_exp IS NULL OR v_exp <= UTC_TIMESTAMP(6) THEN
        COMMIT;
        SET SESSION innodb_lock_wait_timeout = v_lwt;
        SELECT NULL AS remaining_us, NULL AS version, NULL AS name, NULL AS token FROM DUAL WHERE FALSE;
    ELSE
        SET v_exp = UTC_TIMESTAMP(6) + INTERVAL v_lease MICROSECOND;
        UPDATE {p}_sessions SET expires_at = v_exp WHERE id = p_id;
        IF v_ver = p_known THEN
            SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_exp) AS remaining_us,
                   v_ver AS version, NULL AS name, NULL AS token;
        ELSE
            SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_exp) AS remaining_us,
                   v_ver AS version, NULL AS name, NULL AS token
            UNION ALL
            SELECT NULL, NULL, l.name, l.token FROM {p}_leases l WHERE l.session_id = p_id AND l.held = 1;
        END IF;
        COMMIT;
        SET SESSION innodb_lock_wait_timeout = v_lwt;
    END IF;
END`, `
CREATE PROCEDURE IF NOT EXISTS {p}_acquire_v2(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_names LONGTEXT CHARACTER SET ascii COLLATE ascii_bin, IN p_quarantine_us BIGINT, IN p_wait_ms BIGINT)
BEGIN
    DECLARE v_pos BIGINT DEFAULT 1;
    DECLARE v_end BIGINT;
    DECLARE v_name VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_owner CHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_token BIGINT;
    DECLARE v_alive INT;
    DECLARE v_won INT DEFAULT 0;
    DECLARE v_new INT;
    DECLARE v_held INT;
    DECLARE v_check INT DEFAULT 0;
    DECLARE v_ok INT DEFAULT 1;
    DECLARE v_until DATETIME(6) DEFAULT NULL;
    DECLARE v_lwt BIGINT DEFAULT 50;
    DECLARE v_out LONGTEXT CHARACTER SET ascii COLLATE ascii_bin DEFAULT '';
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; SET SESSION innodb_lock_wait_timeout = v_lwt; RESIGNAL; END;
    SET v_lwt = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = GREATEST(1, p_wait_ms DIV 1000);
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    -- As acquire_v1 (see its comments), plus the quarantine (ADR 0130,
    -- 0135), at no cost on the usual path: the statement at the end that
    -- checks the session also checks the quarantine written on the
    -- session's own row (by lost_v1 for every session when a loss is
    -- noted, by open for a session opened during one). Only the paths
    -- that can grant what a loss of records makes look free look at the
    -- epoch row and the markers themselves: a name without a row (the
    -- leases lost) and a lease taken over (its owner's row lost, or an
    -- older state restored). A released lease kept its row through the
    -- loss, so its release was real. That look comes after every lock
    -- wait, so it sees a loss that committed meanwhile.
    WHILE v_pos <= CHAR_LENGTH(p_names) DO
        SET v_end = LOCATE(',', p_names, v_pos);
        IF v_end = 0 THEN
            SET v_end = CHAR_LENGTH(p_names) + 1;
        END IF;
        SET v_name = SUBSTRING(p_names, v_pos, v_end - v_pos);
        SET v_pos = v_end + 1;
        SET v_owner = NULL, v_token = NULL, v_held = 0, v_new = 0;
        UPDATE {p}_leases SET session_id = p_id, held = 1,
               token = LAST_INSERT_ID(GREATEST(token + 1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))))
         WHERE name = v_name AND held = 0;
        IF ROW_COUNT() = 1 THEN
            SET v_token = LAST_INSERT_ID(), v_new = 1, v_won = 1;
        ELSE
            SELECT session_id, token, held INTO v_owner, v_token, v_held FROM {p}_leases WHERE name = v_name FOR UPDATE;
        END IF;
        IF v_new = 0 AND v_token IS NULL THEN
            INSERT INTO {p}_leases (name, session_id, token, held)
            VALUES (v_name, p_id, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)), 1)
            ON DUPLICATE KEY UPDATE token = token;
            SELECT session_id, token, held INTO v_owner, v_token, v_held FROM {p}_leases WHERE name = v_name FOR UPDATE;
            IF v_owner = p_id AND v_held = 1 THEN
                SET v_new = 1, v_won = 1, v_check = 1;
            END IF;
        END IF;
        IF v_new = 0 AND NOT (v_held = 1 AND v_owner <=> p_id) THEN
            SET v_alive = 0;
            IF v_held = 1 THEN
                SELECT COUNT(*) INTO v_alive FROM {p}_sessions
                 WHERE id = v_owner AND expires_at > UTC_TIMESTAMP(6);
                IF v_alive = 0 THEN
                    SELECT COUNT(*) INTO v_alive FROM {p}_sessions WHERE id = v_owner LOCK IN SHARE MODE;
                    SELECT COUNT(*) INTO v_alive FROM {p}_sessions
                     WHERE id = v_owner AND expires_at > UTC_TIMESTAMP(6);
                END IF;
            END IF;
            IF v_alive = 0 THEN
                SET v_token = GREATEST(v_token + 1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)));
                UPDATE {p}_leases SET session_id = p_id, held = 1, token = v_token WHERE name = v_name;
                SET v_won = 1, v_check = 1;
            ELSE
                SET v_token = 0;
            END IF;
        END IF;
        SET v_out = CONCAT(v_out, IF(v_out = '', '', ','), v_token);
    END WHILE;
    IF v_check = 1 THEN
        SELECT COUNT(*) INTO v_ok FROM {p}_epoch e JOIN {p}_leases ml ON ml.name = '~epoch' JOIN {p}_sessions ms ON ms.id = '~epoch'
         WHERE e.id = 1 AND e.quarantine_until <= UTC_TIMESTAMP(6);
    END IF;
    IF v_won = 1 THEN
        UPDATE {p}_sessions SET version = version + 1
         WHERE id = p_id AND expires_at > UTC_TIMESTAMP(6) AND v_ok = 1 AND (quarantine_until IS NULL OR quarantine_until <= UTC_TIMESTAMP(6));
        SET v_alive = ROW_COUNT();
    ELSE
        SELECT COUNT(*) INTO v_alive FROM {p}_sessions
         WHERE id = p_id AND expires_at > UTC_TIMESTAMP(6) AND (quarantine_until IS NULL OR quarantine_until <= UTC_TIMESTAMP(6));
    END IF;
    IF v_alive = 0 THEN
        -- The session expired, or the namespace is quarantined, or its
        -- records were lost. Nothing of the above stays; lost_v1 notes a
        -- loss (or finds none) and says how long the quarantine lasts.
        -- READ COMMITTED again (SET TRANSACTION applies to the next
        -- transaction only): at the session's default, REPEATABLE READ,
        -- lost_v1 would read the epoch row and the markers from a snapshot
        -- taken before it waited for the schema row, missing what a
        -- finder ahead of it wrote.
        ROLLBACK;
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        START TRANSACTION;
        SELECT COUNT(*) INTO v_alive FROM {p}_sessions WHERE id = p_id AND expires_at > UTC_TIMESTAMP(6);
        IF v_alive = 1 THEN
            CALL {p}_lost_v1(p_quarantine_us, v_until);
        END IF;
        COMMIT;
        SET SESSION innodb_lock_wait_timeout = v_lwt;
        IF v_alive = 0 THEN
            SELECT NULL AS tokens FROM DUAL WHERE FALSE;
        ELSEIF v_until > UTC_TIMESTAMP(6) THEN
            SELECT CONCAT('q', GREATEST(1, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_until))) AS tokens;
        ELSE
            -- The quarantine ended between the two looks: nothing was
            -- granted, a later attempt will be.
            SELECT CONCAT('0', REPEAT(',0', CHAR_LENGTH(p_names) - CHAR_LENGTH(REPLACE(p_names, ',', '')))) AS tokens;
        END IF;
    ELSE
        COMMIT;
        SET SESSION innodb_lock_wait_timeout = v_lwt;
        SELECT v_out AS tokens;
    END IF;
END`, `
CREATE PROCEDURE IF NOT EXISTS {p}_release_v2(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_names LONGTEXT CHARACTER SET ascii COLLATE ascii_bin, IN p_tokens LONGTEXT CHARACTER SET ascii COLLATE ascii_bin, IN p_wait_ms BIGINT)
BEGIN
    DECLARE v_pos BIGINT DEFAULT 1;
    DECLARE v_tpos BIGINT DEFAULT 1;
    DECLARE v_end BIGINT;
    DECLARE v_tend BIGINT;
    DECLARE v_name VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_token BIGINT;
    DECLARE v_n INT DEFAULT 0;
    DECLARE v_lwt BIGINT DEFAULT 50;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; SET SESSION innodb_lock_wait_timeout = v_lwt; RESIGNAL; END;
    SET v_lwt = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = GREATEST(1, p_wait_ms DIV 1000);
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    IF p_names <> '' AND LOCATE(',', p_names) = 0 THEN
        SET v_name = p_names, v_token = CAST(p_tokens AS SIGNED);
        UPDATE {p}_leases SET held = 0
         WHERE name = v_name AND token = v_token AND session_id = p_id AND held = 1;
        SET v_n = ROW_COUNT();
        SET v_pos = CHAR_LENGTH(p_names) + 1;
    END IF;
    WHILE v_pos <= CHAR_LENGTH(p_names) DO
        SET v_end = LOCATE(',', p_names, v_pos);
        IF v_end = 0 THEN
            SET v_end = CHAR_LENGTH(p_names) + 1;
        END IF;
        SET v_tend = LOCATE(',', p_tokens, v_tpos);
        IF v_tend = 0 THEN
            SET v_tend = CHAR_LENGTH(p_tokens) + 1;
        END IF;
        SET v_name = SUBSTRING(p_names, v_pos, v_end - v_pos);
        SET v_token = CAST(SUBSTRING(p_tokens, v_tpos, v_tend - v_tpos) AS SIGNED);
        SET v_pos = v_end + 1, v_tpos = v_tend + 1;
        UPDATE {p}_leases SET held = 0
         WHERE name = v_name AND token = v_token AND session_id = p_id AND held = 1;
        SET v_n = v_n + ROW_COUNT();
    END WHILE;
    IF v_n > 0 THEN
        UPDATE {p}_sessions SET version = version + 1 WHERE id = p_id;
    END IF;
    COMMIT;
    SET SESSION innodb_lock_wait_timeout = v_lwt;
END`, `
CREATE PROCEDURE IF NOT EXISTS {p}_close_v2(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_wait_ms BIGINT)
BEGIN
    DECLARE v_lwt BIGINT DEFAULT 50;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; SET SESSION innodb_lock_wait_timeout = v_lwt; RESIGNAL; END;
    SET v_lwt = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = GREATEST(1, p_wait_ms DIV 1000);
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    UPDATE {p}_leases SET held = 0 WHERE session_id = p_id AND held = 1 ORDER BY name;
    DELETE FROM {p}_sessions WHERE id = p_id;
    COMMIT;
    SET SESSION innodb_lock_wait_timeout = v_lwt;
END`, `
UPDATE {p}_schema SET version = 3, compatible_from = 1 WHERE id = 1`},
	// 4: acquire_v3 and release_v3, as acquire_v2 and release_v2 but
	// without bounding their own lock waits: on MariaDB the caller runs
	// them as SET STATEMENT innodb_lock_wait_timeout = N FOR CALL …, which
	// sets the bound for the one call and restores the connection's value
	// itself (the same N, GREATEST(1, wait_ms DIV 1000), ADR 0135), in
	// place of the two statements that saved, set and restored it (about
	// 25 µs a call, ADR 0144). MySQL has no SET STATEMENT and keeps calling
	// the version 3 routines. acquire_v3 also grants one released name
	// without walking the list. Nothing else changes: version 3 code keeps
	// running beside it.
	3: {`
CREATE PROCEDURE IF NOT EXISTS {p}_acquire_v3(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_names LONGTEXT CHARACTER SET ascii COLLATE ascii_bin, IN p_quarantine_us BIGINT, IN p_hint INT)
BEGIN
    DECLARE v_pos BIGINT DEFAULT 1;
    DECLARE v_end BIGINT;
    DECLARE v_name VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_owner CHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_token BIGINT;
    DECLARE v_alive INT;
    DECLARE v_won INT DEFAULT 0;
    DECLARE v_new INT;
    DECLARE v_held INT;
    DECLARE v_check INT DEFAULT 0;
    DECLARE v_ok INT DEFAULT 1;
    DECLARE v_tried INT DEFAULT 0;
    DECLARE v_until DATETIME(6) DEFAULT NULL;
    DECLARE v_out LONGTEXT CHARACTER SET ascii COLLATE ascii_bin DEFAULT '';
    DECLARE v_hint VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
        ROLLBACK;
        IF v_hint IS NOT NULL THEN
            DO RELEASE_LOCK(v_hint);
        END IF;
        RESIGNAL;
    END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    -- As acquire_v2 (see its comments and acquire_v1's). The lock waits
    -- are bounded by the caller's SET STATEMENT. One name (no comma) whose
    -- lease was released is taken by the first statement, as in the loop
    -- below; if that finds no released row, the loop goes on from the
    -- locking read.
    --
    -- p_hint (ADR 0145; 0 from a Backend): bit 2 answers "w" instead of
    -- "0" for a name refused while another connection holds its wake-up
    -- hint, the named lock simba:<sha1 of "<database>/{p}:<name>"> (named
    -- locks are the server's, not a database's); bit 1 (a
    -- Notifier's call of one name, on its hint connection) takes that
    -- named lock for a name it grants, before the commit, so that any
    -- acquire refused the name afterwards finds it held. The hint is never
    -- the lease: only the rows grant.
    IF LOCATE(',', p_names) = 0 THEN
        SET v_name = p_names;
        UPDATE {p}_leases SET session_id = p_id, held = 1,
               token = LAST_INSERT_ID(GREATEST(token + 1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))))
         WHERE name = v_name AND held = 0;
        IF ROW_COUNT() = 1 THEN
            SET v_out = LAST_INSERT_ID(), v_won = 1, v_pos = CHAR_LENGTH(p_names) + 1;
        ELSE
            SET v_tried = 1;
        END IF;
    END IF;
    WHILE v_pos <= CHAR_LENGTH(p_names) DO
        SET v_end = LOCATE(',', p_names, v_pos);
        IF v_end = 0 THEN
            SET v_end = CHAR_LENGTH(p_names) + 1;
        END IF;
        SET v_name = SUBSTRING(p_names, v_pos, v_end - v_pos);
        SET v_pos = v_end + 1;
        SET v_owner = NULL, v_token = NULL, v_held = 0, v_new = 0;
        IF v_tried = 1 THEN
            -- The one name's UPDATE above found no released row.
            SET v_tried = 0;
            SELECT session_id, token, held INTO v_owner, v_token, v_held FROM {p}_leases WHERE name = v_name FOR UPDATE;
        ELSE
            UPDATE {p}_leases SET session_id = p_id, held = 1,
                   token = LAST_INSERT_ID(GREATEST(token + 1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))))
             WHERE name = v_name AND held = 0;
            IF ROW_COUNT() = 1 THEN
                SET v_token = LAST_INSERT_ID(), v_new = 1, v_won = 1;
            ELSE
                SELECT session_id, token, held INTO v_owner, v_token, v_held FROM {p}_leases WHERE name = v_name FOR UPDATE;
            END IF;
        END IF;
        IF v_new = 0 AND v_token IS NULL THEN
            INSERT INTO {p}_leases (name, session_id, token, held)
            VALUES (v_name, p_id, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)), 1)
            ON DUPLICATE KEY UPDATE token = token;
            SELECT session_id, token, held INTO v_owner, v_token, v_held FROM {p}_leases WHERE name = v_name FOR UPDATE;
            IF v_owner = p_id AND v_held = 1 THEN
                SET v_check = 1, v_new = 1, v_won = 1;
            END IF;
        END IF;
        IF v_new = 0 AND NOT (v_held = 1 AND v_owner <=> p_id) THEN
            SET v_alive = 0;
            IF v_held = 1 THEN
                SELECT COUNT(*) INTO v_alive FROM {p}_sessions
                 WHERE id = v_owner AND expires_at > UTC_TIMESTAMP(6);
                IF v_alive = 0 THEN
                    SELECT COUNT(*) INTO v_alive FROM {p}_sessions WHERE id = v_owner LOCK IN SHARE MODE;
                    SELECT COUNT(*) INTO v_alive FROM {p}_sessions
                     WHERE id = v_owner AND expires_at > UTC_TIMESTAMP(6);
                END IF;
            END IF;
            IF v_alive = 0 THEN
                SET v_token = GREATEST(v_token + 1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)));
                UPDATE {p}_leases SET session_id = p_id, held = 1, token = v_token WHERE name = v_name;
                SET v_check = 1, v_won = 1;
            ELSE
                SET v_token = 0;
            END IF;
        END IF;
        IF v_token = 0 AND p_hint & 2 AND IS_USED_LOCK(CONCAT('simba:', SHA1(CONCAT(DATABASE(), '/{p}:', v_name)))) IS NOT NULL THEN
            SET v_out = CONCAT(v_out, IF(v_out = '', '', ','), 'w');
        ELSE
            SET v_out = CONCAT(v_out, IF(v_out = '', '', ','), v_token);
        END IF;
    END WHILE;
    IF v_check = 1 THEN
        SELECT COUNT(*) INTO v_ok FROM {p}_epoch e JOIN {p}_leases ml ON ml.name = '~epoch' JOIN {p}_sessions ms ON ms.id = '~epoch'
         WHERE e.id = 1 AND e.quarantine_until <= UTC_TIMESTAMP(6);
    END IF;
    IF v_won = 1 THEN
        UPDATE {p}_sessions SET version = version + 1
         WHERE id = p_id AND expires_at > UTC_TIMESTAMP(6)
           AND v_ok = 1 AND (quarantine_until IS NULL OR quarantine_until <= UTC_TIMESTAMP(6));
        SET v_alive = ROW_COUNT();
    ELSE
        SELECT COUNT(*) INTO v_alive FROM {p}_sessions
         WHERE id = p_id AND expires_at > UTC_TIMESTAMP(6)
           AND (quarantine_until IS NULL OR quarantine_until <= UTC_TIMESTAMP(6));
    END IF;
    IF v_alive = 0 THEN
        -- As in acquire_v2: nothing of the above stays, lost_v1 notes a
        -- loss or finds none.
        ROLLBACK;
        -- READ COMMITTED again, for lost_v1 (see acquire_v2).
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        START TRANSACTION;
        SELECT COUNT(*) INTO v_alive FROM {p}_sessions WHERE id = p_id AND expires_at > UTC_TIMESTAMP(6);
        IF v_alive = 1 THEN
            CALL {p}_lost_v1(p_quarantine_us, v_until);
        END IF;
        COMMIT;
        IF v_alive = 0 THEN
            SELECT NULL AS tokens FROM DUAL WHERE FALSE;
        ELSEIF v_until > UTC_TIMESTAMP(6) THEN
            SELECT CONCAT('q', GREATEST(1, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_until))) AS tokens;
        ELSE
            SELECT CONCAT('0', REPEAT(',0', CHAR_LENGTH(p_names) - CHAR_LENGTH(REPLACE(p_names, ',', '')))) AS tokens;
        END IF;
    ELSE
        IF p_hint & 1 AND LOCATE(',', p_names) = 0 AND v_won = 1 THEN
            SET v_hint = CONCAT('simba:', SHA1(CONCAT(DATABASE(), '/{p}:', p_names)));
            IF IS_USED_LOCK(v_hint) IS NULL THEN
                DO GET_LOCK(v_hint, 0);
            ELSE
                SET v_hint = NULL; -- ours already, or another's: not taken
            END IF;
        END IF;
        COMMIT;
        SELECT v_out AS tokens;
    END IF;
END`, `
CREATE PROCEDURE IF NOT EXISTS {p}_release_v3(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_names LONGTEXT CHARACTER SET ascii COLLATE ascii_bin, IN p_tokens LONGTEXT CHARACTER SET ascii COLLATE ascii_bin, IN p_hint INT)
BEGIN
    DECLARE v_pos BIGINT DEFAULT 1;
    DECLARE v_tpos BIGINT DEFAULT 1;
    DECLARE v_end BIGINT;
    DECLARE v_tend BIGINT;
    DECLARE v_name VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_token BIGINT;
    DECLARE v_n INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    -- As release_v2; the lock waits are bounded by the caller's SET
    -- STATEMENT. p_hint 1 (a Notifier's release of one lease, on its hint
    -- connection): once the release has committed, the name's wake-up
    -- hint is given back (a no-op unless this connection holds it), which
    -- wakes the acquires waiting for it (ADR 0145).
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    IF p_names <> '' AND LOCATE(',', p_names) = 0 THEN
        SET v_name = p_names, v_token = CAST(p_tokens AS SIGNED);
        UPDATE {p}_leases SET held = 0
         WHERE name = v_name AND token = v_token AND session_id = p_id AND held = 1;
        SET v_n = ROW_COUNT();
        SET v_pos = CHAR_LENGTH(p_names) + 1;
    END IF;
    WHILE v_pos <= CHAR_LENGTH(p_names) DO
        SET v_end = LOCATE(',', p_names, v_pos);
        IF v_end = 0 THEN
            SET v_end = CHAR_LENGTH(p_names) + 1;
        END IF;
        SET v_tend = LOCATE(',', p_tokens, v_tpos);
        IF v_tend = 0 THEN
            SET v_tend = CHAR_LENGTH(p_tokens) + 1;
        END IF;
        SET v_name = SUBSTRING(p_names, v_pos, v_end - v_pos);
        SET v_token = CAST(SUBSTRING(p_tokens, v_tpos, v_tend - v_tpos) AS SIGNED);
        SET v_pos = v_end + 1, v_tpos = v_tend + 1;
        UPDATE {p}_leases SET held = 0
         WHERE name = v_name AND token = v_token AND session_id = p_id AND held = 1;
        SET v_n = v_n + ROW_COUNT();
    END WHILE;
    IF v_n > 0 THEN
        UPDATE {p}_sessions SET version = version + 1 WHERE id = p_id;
    END IF;
    COMMIT;
    IF p_hint = 1 AND v_n > 0 AND LOCATE(',', p_names) = 0 THEN
        DO RELEASE_LOCK(CONCAT('simba:', SHA1(CONCAT(DATABASE(), '/{p}:', p_names))));
    END IF;
END`, `
UPDATE {p}_schema SET version = 4, compatible_from = 1 WHERE id = 1`},
	// 5 (ADR 0252): no row per name, tokens through 1024 marks, the
	// lock-delay; PostgreSQL's version 7 (ADR 0250, 0251) in MariaDB's
	// terms. A lease row lives while its name is held: release_v4 and
	// close_v3 delete it, open_v4 sweeps expired sessions' rows once
	// their delay has passed. A grant locks its bucket's mark (bucket: the
	// first 10 bits of MD5(name)), takes GREATEST(mark + 1, clock µs,
	// row token + 1) and raises the mark; the Go side passes names in
	// (bucket, name) order. acquire_v5 and release_v5 are MySQL's (no SET
	// STATEMENT): they bound the lock waits and call acquire_v4 and
	// release_v4.
	//
	// Older routines' grants are refused by a CHECK on the lease rows:
	// a held row must carry grant_token = token (written by version 5's
	// grants only), unless it is legacy (a row from before this
	// migration, whose tokens the fold below took into the marks). An
	// older INSERT (grant_token NULL) fails, and so does an older grant
	// of a row version 5 wrote (token changed, grant_token not); an older
	// grant of a legacy row, which counts from the row's own token, may
	// still run, and version 5 neither deletes a legacy row (the sweep
	// skips them) nor grants one below its token. Releases and closes of
	// older processes (held = 0) pass. compatible_from 5.
	//
	// The CHECK comes while legacy's default is still 1, and the default
	// becomes 0 only after it (ADR 0285): each statement commits on its
	// own, and an older process's grant in between would otherwise be a
	// held row the CHECK refuses to be added over, failing the migration
	// for as long as that process holds the name. The older rows written
	// before the default changes are legacy, and the fold below takes
	// their tokens.
	4: {`
CREATE TABLE IF NOT EXISTS {p}_marks (
    bucket INT NOT NULL PRIMARY KEY,
    token  BIGINT NOT NULL
) ENGINE=InnoDB`, `
INSERT INTO {p}_marks (bucket, token)
WITH RECURSIVE d (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM d WHERE n < 31)
SELECT x.n * 32 + y.n, 0 FROM d x, d y
ON DUPLICATE KEY UPDATE bucket = {p}_marks.bucket`, `
ALTER TABLE {p}_leases ADD COLUMN legacy TINYINT NOT NULL DEFAULT 1`, `
ALTER TABLE {p}_leases ADD COLUMN delay_us BIGINT NOT NULL DEFAULT 0`, `
ALTER TABLE {p}_leases ADD COLUMN ended_at DATETIME(6) NULL`, `
ALTER TABLE {p}_leases ADD COLUMN grant_token BIGINT NULL`, `
ALTER TABLE {p}_leases ADD CONSTRAINT {p}_grants_v5 CHECK (held = 0 OR legacy = 1 OR grant_token <=> token)`, `
ALTER TABLE {p}_leases ALTER COLUMN legacy SET DEFAULT 0`, `
UPDATE {p}_marks m JOIN (
    SELECT CONV(LEFT(MD5(name), 3), 16, 10) >> 2 AS bucket, MAX(token) AS token
      FROM {p}_leases WHERE name <> '~epoch' GROUP BY 1) f ON m.bucket = f.bucket
   SET m.token = GREATEST(m.token, f.token)`, `
DELETE l FROM {p}_leases l JOIN {p}_marks m ON m.bucket = CONV(LEFT(MD5(l.name), 3), 16, 10) >> 2
 WHERE l.held = 0 AND l.name <> '~epoch' AND l.token <= m.token`, `
CREATE PROCEDURE IF NOT EXISTS {p}_open_v4(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_lease_us BIGINT, IN p_owner TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, IN p_quarantine_us BIGINT, IN p_wait_ms BIGINT)
BEGIN
    DECLARE v_exp DATETIME(6);
    DECLARE v_until DATETIME(6) DEFAULT NULL;
    DECLARE v_n INT;
    DECLARE v_lwt BIGINT DEFAULT 50;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; SET SESSION innodb_lock_wait_timeout = v_lwt; RESIGNAL; END;
    SET v_lwt = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = GREATEST(1, p_wait_ms DIV 1000);
    -- The sweep (bounded): up to 100 expired sessions with something to
    -- delete now: lease rows whose lock-delay has passed (legacy rows
    -- stay: their tokens may be above the marks), and the session row
    -- itself once it holds no lease (a session in a delay stays for a
    -- later open). Only sessions with work count: expired sessions that
    -- hold only legacy rows, or rows in a delay, would otherwise fill the
    -- 100 at every open and keep the sweep from the others for good.
    --
    -- The candidates come from a consistent (non-locking) read: a DELETE
    -- over the tables' scans locked every live row on the way, and
    -- deadlocked with releases and acquires (Error 1213 under 8
    -- concurrent cycles). Each is swept in a transaction of its own (one
    -- holding a session's rows while it waited for another's deadlocked
    -- with an acquire of a name of each), its rows one by one in (bucket,
    -- name) order, the order acquires and releases lock names in (by the
    -- index, in name order, the sweep deadlocked with an acquire taking
    -- over two names of the session, and with a late release of both),
    -- and its session row last, as in every routine. The DELETE of a row
    -- forces the primary key: naming the session, it went through the
    -- session index on MariaDB, locking the index entry before the row,
    -- the reverse of a takeover's order (1213 in 8 s of churn).
    --
    -- The read is not the last word on a session: a renewal that found it
    -- alive just before its expiry may commit after the read (it holds
    -- the session row from its check to its commit), and the sweep
    -- deleted the rows of a session the renewal had just extended, whose
    -- names another was then granted. So once its rows are deleted the
    -- session row is locked and read again, and a session renewed
    -- meanwhile gets its rows back. The lock is shared while the session
    -- keeps a held row (an acquire looking at that row holds it and the
    -- session row shared, and may go on to a row deleted here), and
    -- exclusive to delete the session row, when no acquire can be looking
    -- at one of its rows (the read below would see that row held). With
    -- its expires_at unchanged, the session is expired for good (renew
    -- refuses it), and the value read is the one its delays count from.
    sweep: BEGIN
        DECLARE v_sid CHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
        DECLARE v_sexp DATETIME(6);
        DECLARE v_done INT DEFAULT 0;
        DECLARE v_swept INT;
        DECLARE v_held INT;
        DECLARE v_renewed INT;
        DECLARE v_lock INT;
        DECLARE c_swept CURSOR FOR
            SELECT s.id, s.expires_at FROM {p}_sessions s WHERE s.expires_at < UTC_TIMESTAMP(6)
               AND (EXISTS (SELECT 1 FROM {p}_leases k WHERE k.session_id = s.id AND k.held = 1 AND k.legacy = 0
                               AND s.expires_at + INTERVAL k.delay_us MICROSECOND <= UTC_TIMESTAMP(6))
                    OR NOT EXISTS (SELECT 1 FROM {p}_leases k WHERE k.session_id = s.id AND k.held = 1))
             ORDER BY s.id LIMIT 100;
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        START TRANSACTION;
        OPEN c_swept; -- read whole here (a cursor is a copy)
        swept: LOOP
            FETCH c_swept INTO v_sid, v_sexp;
            IF v_done = 1 THEN
                LEAVE swept;
            END IF;
            SET v_swept = 0;
            sweep_one: BEGIN
                DECLARE v_name VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin;
                DECLARE v_end INT DEFAULT 0;
                DECLARE c_rows CURSOR FOR
                    SELECT name FROM {p}_leases WHERE session_id = v_sid AND held = 1 AND legacy = 0
                     ORDER BY CONV(LEFT(MD5(name), 3), 16, 10) >> 2, name;
                DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_end = 1;
                OPEN c_rows;
                sweep_rows: LOOP
                    FETCH c_rows INTO v_name;
                    IF v_end = 1 THEN
                        LEAVE sweep_rows;
                    END IF;
                    DELETE l FROM {p}_leases l FORCE INDEX (PRIMARY)
                     WHERE l.name = v_name AND l.session_id = v_sid AND l.held = 1 AND l.legacy = 0
                       AND v_sexp + INTERVAL l.delay_us MICROSECOND <= UTC_TIMESTAMP(6);
                    SET v_swept = v_swept + ROW_COUNT();
                END LOOP;
                CLOSE c_rows;
            END sweep_one;
            SELECT COUNT(*) INTO v_held FROM {p}_leases WHERE session_id = v_sid AND held = 1;
            IF v_held = 0 THEN
                SELECT COUNT(*) INTO v_lock FROM {p}_sessions WHERE id = v_sid FOR UPDATE;
            ELSEIF v_swept > 0 THEN
                SELECT COUNT(*) INTO v_lock FROM {p}_sessions WHERE id = v_sid LOCK IN SHARE MODE;
            END IF;
            SELECT COUNT(*) INTO v_renewed FROM {p}_sessions WHERE id = v_sid AND expires_at <> v_sexp;
            IF v_renewed > 0 THEN
                ROLLBACK; -- renewed meanwhile: not expired
            ELSE
                IF v_held = 0 THEN
                    DELETE FROM {p}_sessions WHERE id = v_sid;
                END IF;
                COMMIT;
            END IF;
            SET TRANSACTION ISOLATION LEVEL READ COMMITTED; -- the next candidate's, alone
            START TRANSACTION;
        END LOOP;
        CLOSE c_swept;
        COMMIT;
    END sweep;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    -- As open_v3.
    SELECT COUNT(*) INTO v_n FROM {p}_schema WHERE id = 1 LOCK IN SHARE MODE;
    SELECT quarantine_until INTO v_until FROM {p}_epoch WHERE id = 1;
    IF v_until IS NULL OR NOT EXISTS (SELECT 1 FROM {p}_sessions WHERE id = '~epoch')
       OR NOT EXISTS (SELECT 1 FROM {p}_leases WHERE name = '~epoch') THEN
        CALL {p}_lost_v1(p_quarantine_us, v_until);
    END IF;
    SET v_exp = UTC_TIMESTAMP(6) + INTERVAL p_lease_us MICROSECOND;
    INSERT INTO {p}_sessions (id, expires_at, lease_us, version, owner, quarantine_until)
    VALUES (p_id, v_exp, p_lease_us, 1, NULLIF(p_owner, ''), IF(UTC_TIMESTAMP(6) < v_until, v_until, NULL));
    COMMIT;
    SET SESSION innodb_lock_wait_timeout = v_lwt;
    SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_exp) AS remaining_us;
END`, `
CREATE PROCEDURE IF NOT EXISTS {p}_acquire_v4(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_names LONGTEXT CHARACTER SET ascii COLLATE ascii_bin, IN p_quarantine_us BIGINT, IN p_hint INT, IN p_delay_us BIGINT)
BEGIN
    DECLARE v_pos BIGINT DEFAULT 1;
    DECLARE v_end BIGINT;
    DECLARE v_name VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_owner CHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_token BIGINT;
    DECLARE v_held INT;
    DECLARE v_delay BIGINT;
    DECLARE v_ended DATETIME(6);
    DECLARE v_exp DATETIME(6);
    DECLARE v_alive INT;
    DECLARE v_b INT;
    DECLARE v_lastb INT DEFAULT -1;
    DECLARE v_mark BIGINT;
    DECLARE v_grant INT;
    DECLARE v_won INT DEFAULT 0;
    DECLARE v_check INT DEFAULT 0;
    DECLARE v_ok INT DEFAULT 1;
    DECLARE v_lostmarks INT DEFAULT 0;
    DECLARE v_until DATETIME(6) DEFAULT NULL;
    DECLARE v_out LONGTEXT CHARACTER SET ascii COLLATE ascii_bin DEFAULT '';
    DECLARE v_hint VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
        ROLLBACK;
        IF v_hint IS NOT NULL THEN
            DO RELEASE_LOCK(v_hint);
        END IF;
        RESIGNAL;
    END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    -- As acquire_v3 (its hints, its final checks), over marks: p_names
    -- comes in (bucket, name) order, and each bucket is locked before its
    -- names' rows, so acquires never deadlock on marks.
    WHILE v_pos <= CHAR_LENGTH(p_names) DO
        SET v_end = LOCATE(',', p_names, v_pos);
        IF v_end = 0 THEN
            SET v_end = CHAR_LENGTH(p_names) + 1;
        END IF;
        SET v_name = SUBSTRING(p_names, v_pos, v_end - v_pos);
        SET v_pos = v_end + 1;
        SET v_b = CONV(LEFT(MD5(v_name), 3), 16, 10) >> 2;
        IF v_b <> v_lastb THEN
            SET v_mark = NULL, v_lastb = v_b;
            SELECT token INTO v_mark FROM {p}_marks WHERE bucket = v_b FOR UPDATE;
            IF v_mark IS NULL THEN
                SET v_lostmarks = 1, v_mark = 0; -- the marks were lost: grant nothing
            END IF;
        END IF;
        SET v_owner = NULL, v_token = NULL, v_held = 0, v_delay = 0, v_ended = NULL, v_grant = 0;
        SELECT session_id, token, held, delay_us, ended_at INTO v_owner, v_token, v_held, v_delay, v_ended
          FROM {p}_leases WHERE name = v_name FOR UPDATE;
        IF v_token IS NULL THEN
            -- Free: no row (another grant of it would need the bucket).
            SET v_token = GREATEST(v_mark + 1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)));
            INSERT INTO {p}_leases (name, session_id, token, held, legacy, delay_us, grant_token)
            VALUES (v_name, p_id, v_token, 1, 0, p_delay_us, v_token);
            SET v_grant = 1, v_check = 1; -- a new name
        ELSEIF NOT (v_held = 1 AND v_owner <=> p_id) THEN
            SET v_alive = 0, v_exp = NULL;
            IF v_held = 1 THEN
                SELECT COUNT(*) INTO v_alive FROM {p}_sessions
                 WHERE id = v_owner AND expires_at > UTC_TIMESTAMP(6);
                IF v_alive = 0 THEN
                    SELECT COUNT(*) INTO v_alive FROM {p}_sessions WHERE id = v_owner LOCK IN SHARE MODE;
                    SELECT COUNT(*) INTO v_alive FROM {p}_sessions
                     WHERE id = v_owner AND expires_at > UTC_TIMESTAMP(6);
                    SELECT expires_at INTO v_exp FROM {p}_sessions WHERE id = v_owner;
                    IF v_alive = 0 AND v_delay > 0 THEN
                        -- Ended without a release: the lock-delay counts
                        -- from the session's expiry, or, its row gone,
                        -- from the first look that found it so.
                        IF v_exp IS NULL THEN
                            IF v_ended IS NULL THEN
                                SET v_ended = UTC_TIMESTAMP(6);
                                UPDATE {p}_leases SET ended_at = v_ended WHERE name = v_name;
                            END IF;
                            SET v_exp = v_ended;
                        END IF;
                        IF UTC_TIMESTAMP(6) < v_exp + INTERVAL v_delay MICROSECOND THEN
                            SET v_alive = 1;
                        END IF;
                    END IF;
                END IF;
            END IF;
            IF v_alive = 0 THEN
                SET v_token = GREATEST(v_token + 1, v_mark + 1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)));
                UPDATE {p}_leases SET session_id = p_id, held = 1, token = v_token, grant_token = v_token, legacy = 0,
                       delay_us = p_delay_us, ended_at = NULL
                 WHERE name = v_name;
                SET v_grant = 1, v_check = 1; -- a takeover
            ELSE
                SET v_token = 0;
            END IF;
        END IF;
        IF v_grant = 1 THEN
            UPDATE {p}_marks SET token = v_token WHERE bucket = v_b;
            SET v_mark = v_token, v_won = 1;
        END IF;
        IF p_hint & 2 AND v_token = 0 AND IS_USED_LOCK(CONCAT('simba:', SHA1(CONCAT(DATABASE(), '/{p}:', v_name)))) IS NOT NULL THEN
            SET v_out = CONCAT(v_out, IF(v_out = '', '', ','), 'w');
        ELSE
            SET v_out = CONCAT(v_out, IF(v_out = '', '', ','), v_token);
        END IF;
    END WHILE;
    IF v_check = 1 THEN
        SELECT COUNT(*) INTO v_ok FROM {p}_epoch e JOIN {p}_leases ml ON ml.name = '~epoch' JOIN {p}_sessions ms ON ms.id = '~epoch'
         WHERE e.id = 1 AND e.quarantine_until <= UTC_TIMESTAMP(6) AND v_lostmarks = 0;
    END IF;
    IF v_won = 1 THEN
        UPDATE {p}_sessions SET version = version + 1
         WHERE id = p_id AND expires_at > UTC_TIMESTAMP(6)
           AND v_ok = 1 AND (quarantine_until IS NULL OR quarantine_until <= UTC_TIMESTAMP(6)) /* acquire_v4 */;
        SET v_alive = ROW_COUNT();
    ELSE
        SELECT COUNT(*) INTO v_alive FROM {p}_sessions
         WHERE id = p_id AND expires_at > UTC_TIMESTAMP(6)
           AND (quarantine_until IS NULL OR quarantine_until <= UTC_TIMESTAMP(6)) /* acquire_v4 */;
    END IF;
    IF v_alive = 0 THEN
        -- As in acquire_v3: nothing of the above stays; lost_v1 notes a
        -- loss or finds none. Lost marks are put back (at 0) and noted as
        -- a loss of the epoch row, so tokens restart from the clock after
        -- a quarantine (ADR 0252).
        ROLLBACK;
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        START TRANSACTION;
        SELECT COUNT(*) INTO v_alive FROM {p}_sessions WHERE id = p_id AND expires_at > UTC_TIMESTAMP(6);
        IF v_alive = 1 THEN
            IF v_lostmarks = 1 THEN
                INSERT INTO {p}_marks (bucket, token)
                WITH RECURSIVE d (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM d WHERE n < 31)
                SELECT x.n * 32 + y.n, 0 FROM d x, d y
                ON DUPLICATE KEY UPDATE bucket = {p}_marks.bucket;
                DELETE FROM {p}_epoch WHERE id = 1;
            END IF;
            CALL {p}_lost_v1(p_quarantine_us, v_until);
        END IF;
        COMMIT;
        IF v_alive = 0 THEN
            SELECT NULL AS tokens FROM DUAL WHERE FALSE;
        ELSEIF v_until > UTC_TIMESTAMP(6) THEN
            SELECT CONCAT('q', GREATEST(1, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_until))) AS tokens;
        ELSE
            SELECT CONCAT('0', REPEAT(',0', CHAR_LENGTH(p_names) - CHAR_LENGTH(REPLACE(p_names, ',', '')))) AS tokens;
        END IF;
    ELSE
        IF p_hint & 1 AND LOCATE(',', p_names) = 0 AND v_won = 1 THEN
            SET v_hint = CONCAT('simba:', SHA1(CONCAT(DATABASE(), '/{p}:', p_names)));
            IF IS_USED_LOCK(v_hint) IS NULL THEN
                DO GET_LOCK(v_hint, 0); -- the hint of the name granted
            ELSE
                SET v_hint = NULL;
            END IF;
        END IF;
        COMMIT;
        SELECT v_out AS tokens;
    END IF;
END`, `
CREATE PROCEDURE IF NOT EXISTS {p}_release_v4(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_names LONGTEXT CHARACTER SET ascii COLLATE ascii_bin, IN p_tokens LONGTEXT CHARACTER SET ascii COLLATE ascii_bin, IN p_hint INT)
BEGIN
    DECLARE v_pos BIGINT DEFAULT 1;
    DECLARE v_tpos BIGINT DEFAULT 1;
    DECLARE v_end BIGINT;
    DECLARE v_tend BIGINT;
    DECLARE v_name VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_token BIGINT;
    DECLARE v_n INT DEFAULT 0;
    DECLARE v_alive INT DEFAULT 0;
    DECLARE v_delayed INT DEFAULT 0;
    DECLARE v_c INT;
    DECLARE v_pass INT DEFAULT 1;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    -- As release_v3, deleting each released lease's row; a lease with a
    -- lock-delay whose session has expired stays (ADR 0285): its term
    -- ended at the expiry, and the delay it owes from then is not cut
    -- short by a release that comes after (the paused holder woke up).
    --
    -- Whether the session lives is read once, after every released row
    -- is locked, and under the session row's lock, the order every
    -- routine locks in (lease rows, then the session row): read before
    -- the rows, it went stale while the release waited for one (another
    -- session's acquire holds it while it looks at the holder) and the
    -- session expired meanwhile, and the row went inside its delay; read
    -- without the lock, a renewal committing meanwhile went unseen and
    -- the row stayed, held by a live session that had released it; read
    -- under the session row's lock between two names' rows (a subquery
    -- in each DELETE), it deadlocked with open_v4's sweep. Rows without
    -- a delay go at once (pass 1); those with one are locked, and go in
    -- pass 2 if the session lives. The names come in (bucket, name)
    -- order, the order acquires lock them in; the DELETEs force the
    -- primary key (see open_v4).
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    passes: LOOP
        SET v_pos = 1, v_tpos = 1;
        WHILE v_pos <= CHAR_LENGTH(p_names) DO
            SET v_end = LOCATE(',', p_names, v_pos);
            IF v_end = 0 THEN
                SET v_end = CHAR_LENGTH(p_names) + 1;
            END IF;
            SET v_tend = LOCATE(',', p_tokens, v_tpos);
            IF v_tend = 0 THEN
                SET v_tend = CHAR_LENGTH(p_tokens) + 1;
            END IF;
            SET v_name = SUBSTRING(p_names, v_pos, v_end - v_pos);
            SET v_token = CAST(SUBSTRING(p_tokens, v_tpos, v_tend - v_tpos) AS SIGNED);
            SET v_pos = v_end + 1, v_tpos = v_tend + 1;
            IF v_pass = 1 THEN
                DELETE l FROM {p}_leases l FORCE INDEX (PRIMARY)
                 WHERE l.name = v_name AND l.token = v_token AND l.session_id = p_id AND l.held = 1 AND l.delay_us = 0;
                SET v_c = ROW_COUNT();
                SET v_n = v_n + v_c;
                IF v_c = 0 THEN -- a delay (or not ours): locked, for pass 2
                    SELECT COUNT(*) INTO v_c FROM {p}_leases
                     WHERE name = v_name AND token = v_token AND session_id = p_id AND held = 1 FOR UPDATE;
                    SET v_delayed = v_delayed + v_c;
                END IF;
            ELSE
                DELETE l FROM {p}_leases l FORCE INDEX (PRIMARY)
                 WHERE l.name = v_name AND l.token = v_token AND l.session_id = p_id AND l.held = 1;
                SET v_n = v_n + ROW_COUNT();
            END IF;
        END WHILE;
        IF v_pass = 2 OR v_delayed = 0 THEN
            LEAVE passes;
        END IF;
        SELECT COUNT(*) INTO v_alive FROM {p}_sessions WHERE id = p_id AND expires_at > UTC_TIMESTAMP(6) FOR UPDATE;
        IF v_alive = 0 THEN
            LEAVE passes;
        END IF;
        SET v_pass = 2;
    END LOOP;
    IF v_n > 0 THEN
        UPDATE {p}_sessions SET version = version + 1 WHERE id = p_id;
    END IF;
    COMMIT;
    IF p_hint = 1 AND v_n > 0 AND LOCATE(',', p_names) = 0 THEN
        DO RELEASE_LOCK(CONCAT('simba:', SHA1(CONCAT(DATABASE(), '/{p}:', p_names)))); -- once the release committed
    END IF;
END`, `
CREATE PROCEDURE IF NOT EXISTS {p}_close_v3(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_wait_ms BIGINT)
BEGIN
    DECLARE v_lwt BIGINT DEFAULT 50;
    DECLARE v_alive INT DEFAULT 0;
    DECLARE v_held INT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; SET SESSION innodb_lock_wait_timeout = v_lwt; RESIGNAL; END;
    SET v_lwt = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = GREATEST(1, p_wait_ms DIV 1000);
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    -- Once the session has expired, its leases with a lock-delay stay,
    -- and its row with them (ADR 0285): the delay counts from its expiry,
    -- and open_v4's sweep deletes both after it.
    --
    -- As release_v4: the rows without a delay go at once (pass 1), those
    -- with one are locked, and whether the session lives is read after
    -- them, under the session row's lock (read before, it went stale
    -- while the close waited for a row and the session expired
    -- meanwhile); they go in pass 2 if it lives. Both passes take the
    -- rows in (bucket, name) order, the order acquires lock names in: a
    -- DELETE over the session's index took them by name, and deadlocked
    -- with an acquire taking over two names of a session closed late.
    -- The session row goes if no held row is left, as a consistent read
    -- sees it (a NOT EXISTS inside the DELETE read the rows with shared
    -- locks after locking the session row: the reverse of an acquire).
    closed: BEGIN
        DECLARE v_name VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin;
        DECLARE v_end INT DEFAULT 0;
        DECLARE v_pass INT DEFAULT 1;
        DECLARE v_c INT;
        DECLARE v_delayed INT DEFAULT 0;
        DECLARE c_rows CURSOR FOR
            SELECT name FROM {p}_leases WHERE session_id = p_id AND held = 1
             ORDER BY CONV(LEFT(MD5(name), 3), 16, 10) >> 2, name;
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_end = 1;
        close_passes: LOOP
            SET v_end = 0;
            OPEN c_rows;
            close_rows: LOOP
                FETCH c_rows INTO v_name;
                IF v_end = 1 THEN
                    LEAVE close_rows;
                END IF;
                IF v_pass = 1 THEN
                    DELETE l FROM {p}_leases l FORCE INDEX (PRIMARY)
                     WHERE l.name = v_name AND l.session_id = p_id AND l.held = 1 AND l.delay_us = 0;
                    IF ROW_COUNT() = 0 THEN -- a delay (or not ours any longer): locked, for pass 2
                        SELECT COUNT(*) INTO v_c FROM {p}_leases WHERE name = v_name AND session_id = p_id AND held = 1 FOR UPDATE;
                        SET v_delayed = v_delayed + v_c;
                    END IF;
                ELSE
                    DELETE l FROM {p}_leases l FORCE INDEX (PRIMARY)
                     WHERE l.name = v_name AND l.session_id = p_id AND l.held = 1;
                END IF;
            END LOOP;
            CLOSE c_rows;
            IF v_pass = 2 OR v_delayed = 0 THEN
                LEAVE close_passes;
            END IF;
            SELECT COUNT(*) INTO v_alive FROM {p}_sessions WHERE id = p_id AND expires_at > UTC_TIMESTAMP(6) FOR UPDATE;
            IF v_alive = 0 THEN
                LEAVE close_passes;
            END IF;
            SET v_pass = 2;
        END LOOP;
    END closed;
    SELECT COUNT(*) INTO v_held FROM {p}_leases WHERE session_id = p_id AND held = 1;
    IF v_held = 0 THEN
        DELETE FROM {p}_sessions WHERE id = p_id;
    END IF;
    COMMIT;
    SET SESSION innodb_lock_wait_timeout = v_lwt;
END`, `
CREATE PROCEDURE IF NOT EXISTS {p}_acquire_v5(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_names LONGTEXT CHARACTER SET ascii COLLATE ascii_bin, IN p_quarantine_us BIGINT, IN p_wait_ms BIGINT, IN p_delay_us BIGINT)
BEGIN
    -- MySQL's (no SET STATEMENT): acquire_v4 under the lock-wait bound.
    DECLARE v_lwt BIGINT DEFAULT 50;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN SET SESSION innodb_lock_wait_timeout = v_lwt; RESIGNAL; END;
    SET v_lwt = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = GREATEST(1, p_wait_ms DIV 1000);
    CALL {p}_acquire_v4(p_id, p_names, p_quarantine_us, 0, p_delay_us);
    SET SESSION innodb_lock_wait_timeout = v_lwt;
END`, `
CREATE PROCEDURE IF NOT EXISTS {p}_release_v5(IN p_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_names LONGTEXT CHARACTER SET ascii COLLATE ascii_bin, IN p_tokens LONGTEXT CHARACTER SET ascii COLLATE ascii_bin, IN p_wait_ms BIGINT)
BEGIN
    -- MySQL's: release_v4 under the lock-wait bound.
    DECLARE v_lwt BIGINT DEFAULT 50;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN SET SESSION innodb_lock_wait_timeout = v_lwt; RESIGNAL; END;
    SET v_lwt = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = GREATEST(1, p_wait_ms DIV 1000);
    CALL {p}_release_v4(p_id, p_names, p_tokens, 0);
    SET SESSION innodb_lock_wait_timeout = v_lwt;
END`, `
UPDATE {p}_schema SET version = 5, compatible_from = 5 WHERE id = 1`},
}

// initEpoch ends the creation of a new namespace (Migration from 0): tables
// that did not exist held no leases, so the new namespace starts with no
// quarantine (ADR 0130). Never part of a migration of existing tables,
// which may have been restored from a backup. MySQL's DDL is not
// transactional: if the creation stops before this statement, the row is
// missing and the first acquire quarantines, the safe side.
var initEpoch = `
INSERT INTO {p}_epoch (id, quarantine_until) VALUES (1, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE id = id`
