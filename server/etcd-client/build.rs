//! Compiles the trimmed etcd v3 protos with protox (pure Rust), so a build needs no system
//! `protoc`; only the client side is generated.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["etcd/etcdserverpb/rpc.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
