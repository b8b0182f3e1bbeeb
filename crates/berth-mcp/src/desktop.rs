//! The desktop's tools, shaped as computer-use models are used to them: a screenshot, then actions whose
//! coordinates are that screenshot's pixels (its size passed along, so that the API scales them to the
//! screen's), then another screenshot to see what they did.

use base64::Engine as _;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};
use serde_json::{Map, Value, json};

use crate::api::{ApiError, Body};
use crate::args::{DesktopActionArgs, DesktopWaitArgs, SandboxArgs, ScreenshotArgs, SizeArg};
use crate::server::{Berth, failed, json_result};
use crate::tools::sandbox_path;

/// A screenshot's bounds when none are given: what computer-use models read best, and small enough to keep
/// a conversation's images affordable.
const DEFAULT_SHOT: SizeArg = SizeArg { width: 1280, height: 800 };

/// A PNG's width and height, from its IHDR chunk (the first, right after the signature).
fn png_size(png: &[u8]) -> Option<SizeArg> {
    if png.len() < 24 || &png[..8] != b"\x89PNG\r\n\x1a\n" || &png[12..16] != b"IHDR" {
        return None;
    }
    let be = |at: usize| u32::from_be_bytes([png[at], png[at + 1], png[at + 2], png[at + 3]]);
    Some(SizeArg { width: be(16), height: be(20) })
}

/// `v`, a coordinate on a side of `from` pixels, on a side of `to` pixels (rounded to the nearest).
fn rescale(v: i64, from: u32, to: u32) -> i64 {
    if from == 0 {
        return v;
    }
    (v * i64::from(to) + i64::from(from) / 2) / i64::from(from)
}

#[tool_router(router = desktop_router, vis = "pub(crate)")]
impl Berth {
    #[tool(
        description = "Take a screenshot of a sandbox's virtual desktop (a sandbox created with desktop: \
                       true) and return it as a PNG image, with its size and the screen's. Always take a \
                       screenshot first, before desktop_action, and again after acting to see what happened. \
                       The coordinates you give desktop_action are pixels of this screenshot, counted from \
                       its top left corner: pass its width and height as desktop_action's coordinates_in. By \
                       default it fits within 1280x800 (a larger screen is made smaller, proportions kept).",
        annotations(read_only_hint = true)
    )]
    async fn desktop_screenshot(
        &self,
        Parameters(a): Parameters<ScreenshotArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.screenshot(a, &ctx).await.unwrap_or_else(failed)
    }

    #[tool(description = "Act on a sandbox's virtual desktop like a person at its mouse and keyboard: a list \
                       of actions done in order (move, click, drag, mouse_down, mouse_up, scroll, type, key, \
                       open, launch, focus). Take a screenshot with desktop_screenshot first: x, y, from and \
                       to are pixels of that screenshot, and coordinates_in must be its width and height \
                       (they are scaled to the screen's). A point off the screenshot is refused and nothing \
                       is done. Returns how many actions were done and where the pointer is; take another \
                       screenshot to see the result (desktop_wait first if the screen is still changing).")]
    async fn desktop_action(
        &self,
        Parameters(a): Parameters<DesktopActionArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.act(a, &ctx).await.unwrap_or_else(failed)
    }

    #[tool(
        description = "Show a sandbox's virtual desktop as it is: its screen's size, where the pointer is (in \
                       the screen's pixels), and its windows bottom to top, each with its id (for a focus \
                       action), title, program, position, size and whether it has the focus.",
        annotations(read_only_hint = true)
    )]
    async fn desktop_info(
        &self,
        Parameters(a): Parameters<SandboxArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.json_tool(&ctx, "GET", sandbox_path(&a.sandbox, "/desktop"), None, None).await
    }

    #[tool(
        description = "Wait until a sandbox's desktop has stopped changing (a page loaded, a window opened, \
                       an animation over) for settle_ms, at most timeout_ms, before the next screenshot. \
                       Returns whether it settled and how long it waited.",
        annotations(read_only_hint = true)
    )]
    async fn desktop_wait(
        &self,
        Parameters(a): Parameters<DesktopWaitArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let mut body = Map::new();
        if let Some(v) = a.settle_ms {
            body.insert("settle_ms".into(), v.into());
        }
        if let Some(v) = a.timeout_ms {
            body.insert("timeout_ms".into(), v.into());
        }
        self.json_tool(&ctx, "POST", sandbox_path(&a.sandbox, "/desktop/wait"), Some(Value::Object(body)), None).await
    }
}

impl Berth {
    /// The screen's size, from the sandbox's record.
    async fn screen(&self, ctx: &RequestContext<RoleServer>, sandbox: &str) -> Result<Option<SizeArg>, ApiError> {
        let record = self.call(ctx, "GET", sandbox_path(sandbox, ""), Body::None).await?.json()?;
        Ok(serde_json::from_value(record["desktop"].clone()).ok())
    }

    async fn screenshot(
        &self,
        a: ScreenshotArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ApiError> {
        let (w, h) = match (a.max_width, a.max_height) {
            (None, None) => (Some(DEFAULT_SHOT.width), Some(DEFAULT_SHOT.height)),
            given => given,
        };
        let query: Vec<String> =
            [("max_width", w), ("max_height", h)].iter().filter_map(|(k, v)| v.map(|v| format!("{k}={v}"))).collect();
        let path = sandbox_path(&a.sandbox, &format!("/desktop/screenshot?{}", query.join("&")));
        let png = self.call(ctx, "GET", path, Body::None).await?.body;
        let size = png_size(&png).ok_or_else(|| ApiError::transport("the daemon's screenshot is not a PNG"))?;
        let screen = self.screen(ctx, &a.sandbox).await?.unwrap_or(size);
        let text = format!(
            "screenshot {}x{} of a {}x{} screen. Give desktop_action coordinates in this screenshot's pixels, \
             with coordinates_in {{\"width\": {}, \"height\": {}}}.",
            size.width, size.height, screen.width, screen.height, size.width, size.height
        );
        let data = base64::engine::general_purpose::STANDARD.encode(&png);
        let mut r = CallToolResult::success(vec![ContentBlock::image(data, "image/png"), ContentBlock::text(text)]);
        r.structured_content = Some(json!({
            "width": size.width,
            "height": size.height,
            "screen": {"width": screen.width, "height": screen.height},
        }));
        Ok(r)
    }

    async fn act(&self, a: DesktopActionArgs, ctx: &RequestContext<RoleServer>) -> Result<CallToolResult, ApiError> {
        let mut body = json!({"actions": a.actions});
        if let Some(space) = a.coordinates_in {
            body["coordinates_in"] = json!(space);
        }
        let path = sandbox_path(&a.sandbox, "/desktop/actions");
        let mut done = self.call(ctx, "POST", path, Body::Json(body)).await?.json()?;
        let (x, y) = (done["cursor"]["x"].as_i64().unwrap_or(0), done["cursor"]["y"].as_i64().unwrap_or(0));
        let mut text = format!("done {} action(s); the pointer is at ({x}, {y}) on the screen", done["done"]);
        // The pointer in the screenshot's coordinates too, as the model gave its own.
        if let (Some(space), Some(screen)) = (a.coordinates_in, self.screen(ctx, &a.sandbox).await?) {
            let (sx, sy) = (rescale(x, screen.width, space.width), rescale(y, screen.height, space.height));
            text = format!(
                "{text} {}x{}, ({sx}, {sy}) in the {}x{} screenshot's coordinates",
                screen.width, screen.height, space.width, space.height
            );
            done["cursor_in"] = json!({"x": sx, "y": sy});
        }
        Ok(json_text(done, text))
    }
}

/// A JSON answer with a sentence of its own as the text.
fn json_text(v: Value, text: String) -> CallToolResult {
    let mut r = json_result(v, None);
    r.content = vec![ContentBlock::text(text)];
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_png_says_its_size() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend_from_slice(&1280u32.to_be_bytes());
        png.extend_from_slice(&800u32.to_be_bytes());
        assert_eq!(png_size(&png).map(|s| (s.width, s.height)), Some((1280, 800)));
        assert!(png_size(b"GIF89a").is_none());
    }

    #[test]
    fn the_pointer_is_scaled_back_to_the_screenshot() {
        assert_eq!((rescale(800, 1600, 1280), rescale(500, 1000, 800)), (640, 400));
        assert_eq!(rescale(5, 0, 10), 5);
    }
}
