# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_csivol_server_global_optspecs
    string join \n h/help V/version
end

function __fish_csivol_server_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_csivol_server_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_csivol_server_using_subcommand
    set -l cmd (__fish_csivol_server_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c csivol-server -n "__fish_csivol_server_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol-server -n "__fish_csivol_server_needs_command" -s V -l version -d 'Print version'
complete -c csivol-server -n "__fish_csivol_server_needs_command" -f -a "serve" -d 'Run the server: the cluster state in SQLite (or etcd) behind the HTTP API'
complete -c csivol-server -n "__fish_csivol_server_needs_command" -f -a "backup" -d 'Write a consistent backup of the state database, the server running or not (SQLite\'s online backup: the write-ahead log included, which a copy of `state.db` alone misses)'
complete -c csivol-server -n "__fish_csivol_server_needs_command" -f -a "restore" -d 'Put a backup in place as a data dir\'s state database; the server must be stopped'
complete -c csivol-server -n "__fish_csivol_server_needs_command" -f -a "rotate-secrets-key" -d 'Seal every volume secret under a new secrets key, then replace the key file; the server must be stopped. Running it again finishes an interrupted rotation'
complete -c csivol-server -n "__fish_csivol_server_needs_command" -f -a "migrate" -d 'Copy a stopped single server\'s state (`sqlite:DIR`) into an empty etcd prefix for `--store etcd`, then check the copy row by row'
complete -c csivol-server -n "__fish_csivol_server_needs_command" -f -a "upgrade" -d 'A rolling upgrade of servers over etcd: the cluster\'s schema version, and the command that raises it once every server runs the new release'
complete -c csivol-server -n "__fish_csivol_server_needs_command" -f -a "tls" -d 'Make TLS certificates for a small cluster'
complete -c csivol-server -n "__fish_csivol_server_needs_command" -f -a "dev" -d 'Run a whole cluster on this machine: the server, and the `csivol-agent` and `csivol-hostpath` programs beside this one for each node'
complete -c csivol-server -n "__fish_csivol_server_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l data-dir -d 'Directory for the state database (`state.db`) and the first operator token' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l listen -d 'Address to listen on; port 0 picks a free port (written to `<data-dir>/server.addr`)' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l heartbeat-ttl -d 'A node that misses heartbeats this long is lost and its volumes blocked [default: 30s]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l planned-stop-grace -d 'How long a node whose agent stopped in order (`node-stopping`, on SIGTERM or SIGINT) stays `stopped` before it is treated as lost: its claims held, nothing moved, no auto-fence until then [default: 10m]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l controller-concurrency -d 'Controller operations in flight per plugin [default: 8]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l request-memory -d 'How long the answer to a request that carried an Idempotency-Key, and the tombstone of a released claim, are kept: a repeat within it is answered the first answer, a claim request sent before its alloc\'s release is refused, and a request sent longer ago than this is refused [default: 24h]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l controller-queue-warning -d 'A plugin whose oldest waiting controller operation has waited this long is shown with a warning (`csivol status`, `plugin show`) [default: 1m]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l header-timeout -d 'A request\'s headers must arrive within this; an idle keep-alive connection is closed after it too [default: 10s]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l body-timeout -d 'A request\'s body must arrive within this after its headers, else it is answered 408 and its connection closed; a request without a valid token is answered before its body is read [default: 30s]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l max-connections -d 'Open connections at most; past it, each new connection closes the one silent longest (connected, nothing sent), else the oldest that never showed a valid token or client certificate, and waits for one to close when every connection carries an authenticated caller [default: the open-file limit less 256]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l max-long-polls -d 'Long-polls (blocking queries: agents\' desired state, `--wait`, `events --follow`) in flight at most; beyond it they are answered 503 and retried, so that the rest of the connections stay free for other calls [default: three quarters of --max-connections]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l tls-cert -d 'The server\'s TLS certificate (PEM, its chain after it); with --tls-key the API is served over https:// (`csivol-server tls init` makes one)' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l tls-key -d 'The server certificate\'s private key (PEM)' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l tls-client-ca -d 'A CA (PEM) whose client certificates agents may present (mutual TLS); a node agent\'s certificate must then name the node its token acts for' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l secrets-key-file -d 'The key that seals volume secrets in the state database (64 hex digits, mode 0600) [default: `<data-dir>/secrets.key`, created at the first start]. Keep it beside backups: a backup\'s secrets open only with it' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l store -d 'Where the cluster state lives: `sqlite` (one server, `<data-dir>/state.db`) or `etcd` (several servers over one etcd cluster, see --etcd-endpoints) [default: sqlite]' -r -f -a "sqlite\t''
etcd\t''"
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l etcd-endpoints -d 'The etcd cluster\'s client URLs (`http://h1:2379,http://h2:2379,...`; repeatable) for `--store etcd`. Every server of the cluster names the same etcd and prefix' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l etcd-prefix -d 'The key prefix the state lives under in etcd [default: /csivol]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l etcd-lease-ttl -d 'TTL of the leader\'s etcd lease: a dead leader\'s once-only work (loss detection, controller operations, lease expiry) moves to another server within it and about a second [default: 3s]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l etcd-max-txn-ops -d 'Most operations one etcd transaction may hold: the etcd cluster\'s `--max-txn-ops`. Requests committed together are split to fit; one request that changes more is refused [default: 128, etcd\'s default]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l etcd-ca-cert -d 'The CA (PEM) that signed the etcd members\' certificates, for `https://` endpoints' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l etcd-cert -d 'A client certificate (PEM) for etcd\'s `--client-cert-auth`; with --etcd-key' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l etcd-key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l config -d 'TOML file with the same settings (`data_dir`, `listen`, `heartbeat_ttl = "30s"`, `planned_stop_grace = "10m"`, `controller_concurrency`, `request_memory = "24h"`, `secrets_key_file`, TLS and connection bounds, `node_channel = false`), and fencing: `[[fence]]` methods (`name`, `command`, `timeout`, `nodes`, `labels`, `env`, `auto_fence_after`, `trust_agent_labels`) and `[node_labels.<node>]`; `[limits]` (`claim_labels`, `claim_label_bytes`, `reason_bytes`: lower than the defaults only; `events_kept`, `events_bytes`)' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l no-node-channel -d 'Do not offer node agents the node channel (`GET /v1/nodes/{node}/channel`, one upgraded connection per node for heartbeats and desired-state pushes); they then heartbeat and long-poll over plain requests, as with an older server'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l insecure-http -d 'Serve plain HTTP on a non-loopback address (tokens and secrets then cross the network in clear; a warning is logged at start), e.g. behind a proxy that speaks TLS to the clients: csivol\'s own clients send a token over plain HTTP only to a loopback address'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -l check -d 'Run SQLite\'s `PRAGMA integrity_check` over the state database before serving, and refuse to start if it finds damage. It reads the whole database: off by default'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand serve" -s h -l help -d 'Print help'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand backup" -l data-dir -d 'The server\'s data dir (the one holding `state.db`); the server may be running [default: the `data_dir` of --config]' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand backup" -l config -d 'The server\'s TOML config: its `data_dir`, or with `store = "etcd"` its etcd settings' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand backup" -l etcd-endpoints -d 'The etcd cluster\'s client URLs (`http://h1:2379,...`), as the servers have them in `--etcd-endpoints`' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand backup" -l etcd-prefix -d 'The key prefix the state lives under in etcd [default: /csivol]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand backup" -l etcd-ca-cert -d 'The CA (PEM) that signed the etcd members\' certificates, for `https://` endpoints' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand backup" -l etcd-cert -d 'A client certificate (PEM) for etcd\'s `--client-cert-auth`; with --etcd-key' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand backup" -l etcd-key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand backup" -l to -d 'Where to write the backup (one SQLite file; replaced atomically if it exists)' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand backup" -s h -l help -d 'Print help'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand restore" -l from -d 'A backup written by `csivol-server backup` or `GET /v1/backup` (of either store)' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand restore" -l data-dir -d 'The data dir to restore into; its server must be stopped [default: the `data_dir` of --config]' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand restore" -l config -d 'The server\'s TOML config: its `data_dir`, or with `store = "etcd"` its etcd settings; the command printed to start the server again names it' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand restore" -l etcd-endpoints -d 'The etcd cluster\'s client URLs (`http://h1:2379,...`), as the servers have them in `--etcd-endpoints`' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand restore" -l etcd-prefix -d 'The key prefix the state lives under in etcd [default: /csivol]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand restore" -l etcd-ca-cert -d 'The CA (PEM) that signed the etcd members\' certificates, for `https://` endpoints' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand restore" -l etcd-cert -d 'A client certificate (PEM) for etcd\'s `--client-cert-auth`; with --etcd-key' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand restore" -l etcd-key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand restore" -l force -d 'Replace the cluster the data dir already holds (its database is kept aside as `state.db.before-restore-<time>`)'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand restore" -s h -l help -d 'Print help'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand rotate-secrets-key" -l data-dir -d 'The server\'s data dir [default: from --config]' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand rotate-secrets-key" -l secrets-key-file -d 'The secrets key file [default: `<data-dir>/secrets.key`]' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand rotate-secrets-key" -l config -d 'The server\'s TOML config, for `data_dir` and `secrets_key_file`' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand rotate-secrets-key" -s h -l help -d 'Print help'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand migrate" -l from -d 'The single server\'s state: `sqlite:DIR`, its data dir (the server must be stopped)' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand migrate" -l to -d 'The etcd cluster: `etcd:URL[,URL...]`, its client URLs. The prefix must be empty and no server may run on it during the copy' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand migrate" -l etcd-prefix -d 'The key prefix in etcd [default: /csivol]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand migrate" -l etcd-ca-cert -d 'The CA (PEM) that signed the etcd members\' certificates, for `https://` endpoints' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand migrate" -l etcd-cert -d 'A client certificate (PEM) for etcd\'s `--client-cert-auth`; with --etcd-key' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand migrate" -l etcd-key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand migrate" -s h -l help -d 'Print help'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and not __fish_seen_subcommand_from status finalize help" -s h -l help -d 'Print help'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and not __fish_seen_subcommand_from status finalize help" -f -a "status" -d 'Show the cluster\'s schema version and the newest each live server knows'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and not __fish_seen_subcommand_from status finalize help" -f -a "finalize" -d 'Raise the cluster\'s schema version to the next one, once every live server knows it, and migrate the state in etcd; the servers then migrate their copies. Run it with the new release, after every server runs it. It cannot be undone except by restoring a backup'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and not __fish_seen_subcommand_from status finalize help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and __fish_seen_subcommand_from status" -l etcd-endpoints -d 'The etcd cluster\'s client URLs (`http://h1:2379,...`), as the servers have them in `--etcd-endpoints`' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and __fish_seen_subcommand_from status" -l etcd-prefix -d 'The key prefix the state lives under in etcd [default: /csivol]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and __fish_seen_subcommand_from status" -l etcd-ca-cert -d 'The CA (PEM) that signed the etcd members\' certificates, for `https://` endpoints' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and __fish_seen_subcommand_from status" -l etcd-cert -d 'A client certificate (PEM) for etcd\'s `--client-cert-auth`; with --etcd-key' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and __fish_seen_subcommand_from status" -l etcd-key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and __fish_seen_subcommand_from status" -s h -l help -d 'Print help'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and __fish_seen_subcommand_from finalize" -l etcd-endpoints -d 'The etcd cluster\'s client URLs (`http://h1:2379,...`), as the servers have them in `--etcd-endpoints`' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and __fish_seen_subcommand_from finalize" -l etcd-prefix -d 'The key prefix the state lives under in etcd [default: /csivol]' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and __fish_seen_subcommand_from finalize" -l etcd-ca-cert -d 'The CA (PEM) that signed the etcd members\' certificates, for `https://` endpoints' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and __fish_seen_subcommand_from finalize" -l etcd-cert -d 'A client certificate (PEM) for etcd\'s `--client-cert-auth`; with --etcd-key' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and __fish_seen_subcommand_from finalize" -l etcd-key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and __fish_seen_subcommand_from finalize" -s h -l help -d 'Print help'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and __fish_seen_subcommand_from help" -f -a "status" -d 'Show the cluster\'s schema version and the newest each live server knows'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and __fish_seen_subcommand_from help" -f -a "finalize" -d 'Raise the cluster\'s schema version to the next one, once every live server knows it, and migrate the state in etcd; the servers then migrate their copies. Run it with the new release, after every server runs it. It cannot be undone except by restoring a backup'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand upgrade; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand tls; and not __fish_seen_subcommand_from init help" -s h -l help -d 'Print help'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand tls; and not __fish_seen_subcommand_from init help" -f -a "init" -d 'Create a CA, a server certificate and node certificates in a new directory'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand tls; and not __fish_seen_subcommand_from init help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand tls; and __fish_seen_subcommand_from init" -l dir -d 'The directory to write to (created; it must not hold a CA yet)' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand tls; and __fish_seen_subcommand_from init" -l server-name -d 'A DNS name or IP address clients reach the server by (repeatable); localhost, 127.0.0.1 and ::1 are always included' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand tls; and __fish_seen_subcommand_from init" -l node -d 'A node to make a client certificate for (repeatable)' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand tls; and __fish_seen_subcommand_from init" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand tls; and __fish_seen_subcommand_from help" -f -a "init" -d 'Create a CA, a server certificate and node certificates in a new directory'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand tls; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand dev" -l dir -d 'Directory for all state: server database, agents\' state, plugin state and volume data' -r -F
complete -c csivol-server -n "__fish_csivol_server_using_subcommand dev" -l nodes -d 'How many nodes (`node-1`, `node-2`, ...), each with its own agent and plugin' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand dev" -l listen -d 'Address the server listens on' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand dev" -l heartbeat-ttl -d 'How long a silent node stays ready before it is lost and its volumes blocked' -r
complete -c csivol-server -n "__fish_csivol_server_using_subcommand dev" -l mount -d 'Force plugin mount mode; by default real bind mounts, or marker files where the machine refuses mounts' -r -f -a "bind\t''
none\t''"
complete -c csivol-server -n "__fish_csivol_server_using_subcommand dev" -l no-demo-volumes -d 'Do not create the demo volumes'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand dev" -l no-tls -d 'Serve plain HTTP instead of TLS with the dev cluster\'s own CA (`DIR/tls`)'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand dev" -s h -l help -d 'Print help'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand help; and not __fish_seen_subcommand_from serve backup restore rotate-secrets-key migrate upgrade tls dev help" -f -a "serve" -d 'Run the server: the cluster state in SQLite (or etcd) behind the HTTP API'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand help; and not __fish_seen_subcommand_from serve backup restore rotate-secrets-key migrate upgrade tls dev help" -f -a "backup" -d 'Write a consistent backup of the state database, the server running or not (SQLite\'s online backup: the write-ahead log included, which a copy of `state.db` alone misses)'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand help; and not __fish_seen_subcommand_from serve backup restore rotate-secrets-key migrate upgrade tls dev help" -f -a "restore" -d 'Put a backup in place as a data dir\'s state database; the server must be stopped'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand help; and not __fish_seen_subcommand_from serve backup restore rotate-secrets-key migrate upgrade tls dev help" -f -a "rotate-secrets-key" -d 'Seal every volume secret under a new secrets key, then replace the key file; the server must be stopped. Running it again finishes an interrupted rotation'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand help; and not __fish_seen_subcommand_from serve backup restore rotate-secrets-key migrate upgrade tls dev help" -f -a "migrate" -d 'Copy a stopped single server\'s state (`sqlite:DIR`) into an empty etcd prefix for `--store etcd`, then check the copy row by row'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand help; and not __fish_seen_subcommand_from serve backup restore rotate-secrets-key migrate upgrade tls dev help" -f -a "upgrade" -d 'A rolling upgrade of servers over etcd: the cluster\'s schema version, and the command that raises it once every server runs the new release'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand help; and not __fish_seen_subcommand_from serve backup restore rotate-secrets-key migrate upgrade tls dev help" -f -a "tls" -d 'Make TLS certificates for a small cluster'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand help; and not __fish_seen_subcommand_from serve backup restore rotate-secrets-key migrate upgrade tls dev help" -f -a "dev" -d 'Run a whole cluster on this machine: the server, and the `csivol-agent` and `csivol-hostpath` programs beside this one for each node'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand help; and not __fish_seen_subcommand_from serve backup restore rotate-secrets-key migrate upgrade tls dev help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand help; and __fish_seen_subcommand_from upgrade" -f -a "status" -d 'Show the cluster\'s schema version and the newest each live server knows'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand help; and __fish_seen_subcommand_from upgrade" -f -a "finalize" -d 'Raise the cluster\'s schema version to the next one, once every live server knows it, and migrate the state in etcd; the servers then migrate their copies. Run it with the new release, after every server runs it. It cannot be undone except by restoring a backup'
complete -c csivol-server -n "__fish_csivol_server_using_subcommand help; and __fish_seen_subcommand_from tls" -f -a "init" -d 'Create a CA, a server certificate and node certificates in a new directory'
