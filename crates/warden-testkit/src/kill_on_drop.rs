//! A child process a test started, killed and reaped when the test is done with it (also when
//! it fails).

use std::process::Child;

#[derive(Debug)]
pub struct KillOnDrop(pub Child);

impl KillOnDrop {
    /// Spawn `command` with stdin and stdout to /dev/null (stderr stays the test's).
    pub fn spawn(mut command: std::process::Command) -> std::io::Result<KillOnDrop> {
        use std::process::Stdio;
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map(KillOnDrop)
    }

    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
