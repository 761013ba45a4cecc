//! The Identity service: the plugin's name, capabilities and Probe.

use csivol_csi::csi::v1 as csi;
use tonic::{Request, Response, Status};

use crate::faults::Rpc;

use super::{Expansion, PLUGIN_NAME, Plugin, Service};

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
            .call(Rpc::GetPluginCapabilities, String::new(), |p| {
                Ok(p.plugin_capabilities())
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

impl Plugin {
    fn plugin_capabilities(&self) -> csi::GetPluginCapabilitiesResponse {
        use csi::plugin_capability::{
            Service as S, Type, VolumeExpansion, service, volume_expansion,
        };
        let service = |t: service::Type| csi::PluginCapability {
            r#type: Some(Type::Service(S { r#type: t.into() })),
        };
        let mut capabilities = Vec::new();
        if self.cfg.features.controller_service {
            capabilities.push(service(service::Type::ControllerService));
        }
        if !self.cfg.topology.is_empty() {
            capabilities.push(service(service::Type::VolumeAccessibilityConstraints));
        }
        if self.cfg.features.group_snapshots {
            capabilities.push(service(service::Type::GroupControllerService));
        }
        if self.cfg.features.expand {
            let t = match self.cfg.expansion {
                Expansion::Online => volume_expansion::Type::Online,
                Expansion::Offline => volume_expansion::Type::Offline,
            };
            capabilities.push(csi::PluginCapability {
                r#type: Some(Type::VolumeExpansion(VolumeExpansion { r#type: t.into() })),
            });
        }
        csi::GetPluginCapabilitiesResponse { capabilities }
    }
}
