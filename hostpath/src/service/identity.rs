//! The Identity service: the plugin's name, capabilities and Probe.

use csivol_api::domain::PluginCapabilities;
use csivol_csi::csi::v1 as csi;
use tonic::{Request, Response, Status};

use crate::faults::Rpc;

use super::{PLUGIN_NAME, Service};

#[tonic::async_trait]
impl csi::identity_server::Identity for Service {
    async fn get_plugin_info(
        &self,
        _: Request<csi::GetPluginInfoRequest>,
    ) -> Result<Response<csi::GetPluginInfoResponse>, Status> {
        self.0
            .call(Rpc::GetPluginInfo, String::new(), |_| {
                Ok(csi::GetPluginInfoResponse {
                    name: PLUGIN_NAME.into(),
                    vendor_version: env!("CARGO_PKG_VERSION").into(),
                    manifest: Default::default(),
                })
            })
            .await
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<csi::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<csi::GetPluginCapabilitiesResponse>, Status> {
        self.0
            .call(Rpc::GetPluginCapabilities, String::new(), |_| {
                Ok(PluginCapabilities {
                    controller_service: true,
                    volume_accessibility_constraints: false,
                }
                .into())
            })
            .await
    }

    async fn probe(
        &self,
        _: Request<csi::ProbeRequest>,
    ) -> Result<Response<csi::ProbeResponse>, Status> {
        self.0
            .call(Rpc::Probe, String::new(), |_| {
                Ok(csi::ProbeResponse { ready: Some(true) })
            })
            .await
    }
}
