//! Compiles `csi/v1/csi.proto` with protox (pure Rust), so a build needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=csi/v1/csi.proto");
    let fds = protox::compile(["csi/v1/csi.proto"], ["."])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
