-- Exact retries. The first answer to each mutating request that carried an
-- `Idempotency-Key`, per token and key: the request it answered (method, path and the query
-- that matters; a digest of its body), and the answer as sent (status, body, index), so that
-- a repeat is answered the same without acting again. And a tombstone per released claim
-- (volume, alloc): when and at which change index its release began or it was last
-- removed, so that a claim request sent before that is not recorded again. Both are kept
-- for the server's `request_memory` and pruned by the leader.
CREATE TABLE request_keys (
    token TEXT NOT NULL,
    key TEXT NOT NULL,
    request TEXT NOT NULL,
    digest TEXT NOT NULL,
    status INTEGER NOT NULL,
    answer TEXT NOT NULL,
    answer_index INTEGER,
    at INTEGER NOT NULL,
    PRIMARY KEY (token, key)
);
CREATE INDEX request_keys_at ON request_keys (at);
CREATE TABLE claim_tombstones (
    volume TEXT NOT NULL,
    alloc TEXT NOT NULL,
    released_at INTEGER NOT NULL,
    released_index INTEGER NOT NULL,
    PRIMARY KEY (volume, alloc)
);
CREATE INDEX claim_tombstones_at ON claim_tombstones (released_at);

-- One backend volume is one csivol volume: a registration looks its external id up among
-- the plugin's volumes. Not UNIQUE: a database an older csivol wrote may hold an id under
-- two names, which is kept and named (`serve --check`, `csivol status`), never a failed
-- migration.
CREATE INDEX volumes_external_id ON volumes (plugin, external_id);

-- The parameter sets of a plugin's volumes, in order: every desired state pushed to a
-- node hosting the plugin's controller names a few of them for its GetCapacity calls,
-- each found by one seek here instead of a walk over all the plugin's volumes.
CREATE INDEX volumes_parameters ON volumes (plugin, parameters);

-- A claim's drift (its node found it not mounted as its plugin made it, or registered or
-- came back without it) as a field of its own, JSON: what found it (`check`,
-- `registration`, `return`), when (`at`, unix ms) and why (`reason`), until its republish
-- repairs it. Before, it was kept as the claim's error, `drift: WHY`: such a claim gets the
-- field (found by what the words say, at the claim's last change) and no error, which
-- shows the same words while no other error replaces them.
ALTER TABLE claims ADD COLUMN drift TEXT;
UPDATE claims SET
    drift = json_object(
        'found', CASE
            WHEN substr(error, 8) GLOB 'node * registered without it mounted' THEN 'registration'
            WHEN substr(error, 8) GLOB 'node * came back without it mounted' THEN 'return'
            ELSE 'check'
        END,
        'at', updated_at,
        'reason', substr(error, 8)
    ),
    error = NULL
    WHERE substr(error, 1, 7) = 'drift: ';

-- Who made each claim: the token that asked, so that a claimer's claims are counted against
-- the server's `[limits] claims_per_claimer`. Claims recorded before have none and count for
-- nobody; they are kept as they are.
ALTER TABLE claims ADD COLUMN claimer TEXT;
CREATE INDEX claims_claimer ON claims (claimer) WHERE claimer IS NOT NULL;

-- What a claim asks of its mount, JSON (`api::ClaimMount`): the group its workload writes
-- as and how that group is applied (by the plugin's VOLUME_MOUNT_GROUP or by csivol's
-- ownership change), decided when the claim is recorded. Claims recorded before ask for
-- nothing and are mounted as they were.
ALTER TABLE claims ADD COLUMN mount TEXT;

-- What a volume allows its claims to ask of their mounts (`claim_mount_flags`, JSON) and
-- the SELinux context it is mounted with when a claim names none, beside the volume's row
-- (a row only for a volume that sets one of them), so that a server of the previous
-- release, which does not know them, reads its volumes as before.
CREATE TABLE volume_mounts (
    volume TEXT PRIMARY KEY,
    claim_mount_flags TEXT NOT NULL DEFAULT '[]',
    selinux_context TEXT
);

-- Whether csivol may give a volume a claim's group itself (`ownership`: `never`,
-- `on-root-mismatch`, `recursive`), the volume's own setting, which overrides its plugin's
-- in the server's config; NULL: the plugin's.
ALTER TABLE volume_mounts ADD COLUMN ownership TEXT;

-- Whether a volume takes new claims: a row only for a volume an operator took out of
-- service (`eligibility`: `ineligible`, `draining`), with why, who and since when (unix
-- ms). Its queued claims wait; nothing held is released. A server of the previous release
-- does not read it, so it cannot be set before the cluster runs on this schema.
CREATE TABLE volume_availability (
    volume TEXT PRIMARY KEY,
    eligibility TEXT NOT NULL,
    reason TEXT,
    actor TEXT NOT NULL,
    at INTEGER NOT NULL
);

-- What a token may do and touch when that differs from its role's preset, JSON
-- (`api::TokenScope`: its capabilities, and the volume-name patterns it is narrowed to),
-- beside the role, which stays the name of the preset it began from. NULL: the preset,
-- over every volume, which is what every token made before is. A server of the previous
-- release does not read it and would take a scoped token for its role's preset, so no
-- scoped token can be made before the cluster runs on this schema.
ALTER TABLE tokens ADD COLUMN scope TEXT;

-- Per-job volumes: a volume made for one job's claim (`run --fresh`, `claim --fresh`) and
-- deleted after its release. A row per such volume: the alloc and the name the job gave it,
-- the node it was made for, when it was recorded (unix ms), and, after a failed job that
-- asked for it, until when it is kept for inspection. A server of the previous release does
-- not read it and would keep these volumes for good, so none is made before the cluster
-- runs on this schema.
CREATE TABLE job_volumes (
    volume TEXT PRIMARY KEY,
    alloc TEXT NOT NULL,
    name TEXT NOT NULL,
    node TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    kept_until INTEGER
);
CREATE INDEX job_volumes_alloc ON job_volumes (alloc, name);

-- An operator's labels on a volume (a JSON object of `key: value`), a row only for a
-- volume that has any. A pool's selector chooses its members by them.
CREATE TABLE volume_labels (
    volume TEXT PRIMARY KEY,
    labels TEXT NOT NULL
);

-- Pools: the volumes whose labels carry every `key=value` of `selector` (a JSON object)
-- are its members; a volume belongs to one pool at most. `linger_ms`: how long a node
-- keeps a released member staged (NULL: not at all). `created_at` in unix ms.
CREATE TABLE pools (
    name TEXT PRIMARY KEY,
    selector TEXT NOT NULL,
    linger_ms INTEGER,
    created_at INTEGER NOT NULL
);

-- A pool member's cache key: the key of the last job that released it having succeeded,
-- and when (unix ms). A failed or killed job leaves the row as it was.
CREATE TABLE volume_cache_keys (
    volume TEXT PRIMARY KEY,
    cache_key TEXT NOT NULL,
    at INTEGER NOT NULL
);

-- Every claim made from a pool: which member, for which alloc and node, with which cache
-- key, and why that member (`choice`: `same-key`, `staged-here`, `prefix`, `cold`).
-- `released_at` (unix ms) once its claim was released, so that only the open row of a
-- member and alloc records its key. The last rows of a pool give its warm-hit ratio.
CREATE TABLE pool_claims (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pool TEXT NOT NULL,
    volume TEXT NOT NULL,
    alloc TEXT NOT NULL,
    node TEXT NOT NULL,
    cache_key TEXT,
    choice TEXT NOT NULL,
    why TEXT NOT NULL,
    at INTEGER NOT NULL,
    released_at INTEGER
);
CREATE INDEX pool_claims_pool ON pool_claims (pool, id);
CREATE INDEX pool_claims_member ON pool_claims (volume, alloc);

-- A pool's line: claims waiting for any member (`claim --pool P --queue`), in arrival order
-- (`at`, unix ms, the order a volume's queued claims keep too; `id` breaks ties). `request`:
-- the claim as asked (JSON `api::PoolClaimRequest`); `claimer` and `actor`: the token that
-- asked and who it is, `bounded` whether its claims count against `claims_per_claimer`;
-- `expires_at` (unix ms): its lease, as a claim's. `held`: the member held for it once it
-- waited past the server's bound. A row leaves the line when its claim is granted (a
-- member's claim then answers for it), released or lapsed (a tombstone then does).
CREATE TABLE pool_waiters (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pool TEXT NOT NULL,
    alloc TEXT NOT NULL,
    node TEXT NOT NULL,
    request TEXT NOT NULL,
    claimer TEXT NOT NULL,
    actor TEXT NOT NULL,
    bounded INTEGER NOT NULL,
    at INTEGER NOT NULL,
    expires_at INTEGER,
    held TEXT,
    UNIQUE (pool, alloc)
);

-- Stagings a node keeps after the release of the volume's last claim there, because the
-- volume's pool lingers: the alloc whose release left it, and since and until when (unix
-- ms). While a row stands the volume stays attached and staged on the node with no claim,
-- so that the node's next claim of it skips NodeStageVolume; a claim elsewhere that the
-- volume's access mode excludes ends it at once. A server of the previous release does
-- not read it and would take such a staging down as any release: nothing lingers before
-- the cluster runs on this schema.
CREATE TABLE lingers (
    volume TEXT NOT NULL,
    node TEXT NOT NULL,
    alloc TEXT NOT NULL,
    since INTEGER NOT NULL,
    until INTEGER NOT NULL,
    PRIMARY KEY (volume, node)
);
CREATE INDEX lingers_node ON lingers (node);
CREATE INDEX lingers_until ON lingers (until);

-- Namespaces: teams sharing one cluster. A row per namespace an operator made (`created_at`
-- in unix ms); `default` has none and always exists. A volume belongs to the namespace its
-- key names: `NAMESPACE~NAME`, or the bare name for `default`, which every volume made
-- before is, so no row is rewritten and every id stays. A server of the previous release
-- knows no namespace and would take `team-a~db` for a volume of `default`, so no namespace
-- is made before the cluster runs on this schema.
CREATE TABLE namespaces (
    name TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL
);

-- A namespace's quota (`default`'s too, which has no row in `namespaces`): a JSON object
-- of the bounds it sets (`api::Quota`), a row only for a namespace that has one. A server
-- of the previous release would not honour it, so none is set before the cluster runs on
-- this schema.
CREATE TABLE namespace_quotas (
    namespace TEXT PRIMARY KEY,
    quota TEXT NOT NULL
);
