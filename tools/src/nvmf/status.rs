//! NVMe statuses as nvme-cli prints them, and nvme-cli's exit codes.
//!
//! nvme-cli 2.x (libnvme's `nvme_status_to_string`) prints a failed command as
//! `NVMe status: <name>: <description>(0x<value>)` on stderr, where the value is the
//! CQE Status field without the phase tag (SC bits 7:0, SCT 10:8, CRD 12:11, More 13,
//! DNR 14: what the Linux kernel hands it), and exits with status 1 for any failure
//! (checked against nvme-cli 2.3 of Debian 12: `nvme read` past the end of a Linux
//! nvmet namespace prints `NVMe status: Internal Error: ...(0x6006)` and exits 1).
//! The names and descriptions follow the NVMe Base 2.x §4.2.3 status tables
//! ("Status Code - Generic Command Status Values" and the others), worded as libnvme
//! words them so that scripts matching nvme-cli's output match ours.
use nvme::{Status, StatusCodeType};

/// nvme-cli's exit status for every failure (a command's NVMe status, a transport or
/// connection error, bad arguments).
pub const EXIT_FAILURE: u8 = 1;

/// The status value nvme-cli prints in parentheses: the CQE Status field shifted
/// right by one (the phase tag dropped), so SC, SCT, CRD, More and DNR as the Linux
/// kernel reports them.
pub fn status_value(s: &Status) -> u16 {
    s.to_field() >> 1
}

/// `NVMe status: <description>(0x<value>)`, the line nvme-cli prints for a command
/// that completed with status `s`; `fabrics` for a Fabrics command (Connect), whose
/// command specific codes 80h and above are the Fabrics ones.
pub fn status_line(s: &Status, fabrics: bool) -> String {
    format!(
        "NVMe status: {}(0x{:x})",
        description(s, fabrics),
        status_value(s)
    )
}

/// libnvme's description of status `s` (`"Unknown status"` for a reserved status code
/// type, `"unrecognized"` for a code the table does not name).
pub fn description(s: &Status, fabrics: bool) -> &'static str {
    let sc = s.sc;
    match s.sct {
        StatusCodeType::Generic => generic(sc),
        StatusCodeType::CommandSpecific if sc < 0x80 => command_specific(sc),
        StatusCodeType::CommandSpecific if fabrics => fabrics_specific(sc),
        StatusCodeType::CommandSpecific => nvm_specific(sc),
        StatusCodeType::MediaDataIntegrity => media(sc),
        StatusCodeType::PathRelated => path(sc),
        StatusCodeType::VendorSpecific => "Vendor Specific Status",
        _ => "Unknown status",
    }
}

const UNRECOGNIZED: &str = "unrecognized";

fn generic(sc: u8) -> &'static str {
    match sc {
        0x00 => "Successful Completion: The command completed without error",
        0x01 => "Invalid Command Opcode: A reserved coded value or an unsupported value in the command opcode field",
        0x02 => "Invalid Field in Command: A reserved coded value or an unsupported value in a defined field",
        0x03 => "Command ID Conflict: The command identifier is already in use",
        0x04 => "Data Transfer Error: Transferring the data or metadata associated with a command experienced an error",
        0x05 => "Commands Aborted due to Power Loss Notification: Indicates that the command was aborted due to a power loss notification",
        0x06 => "Internal Error: The command was not completed successfully due to an internal error",
        0x07 => "Command Abort Requested: The command was aborted due to an Abort command",
        0x08 => "Command Aborted due to SQ Deletion: The command was aborted due to a Delete I/O Submission Queue",
        0x09 => "Command Aborted due to Failed Fused Command: The command was aborted due to the other command in a fused operation failing",
        0x0A => "Command Aborted due to Missing Fused Command: The fused command was aborted due to the adjacent submission queue entry not containing a fused command",
        0x0B => "Invalid Namespace or Format: The namespace or the format of that namespace is invalid",
        0x0C => "Command Sequence Error: The command was aborted due to a protocol violation in a multi- command sequence",
        0x0D => "Invalid SGL Segment Descriptor: The command includes an invalid SGL Last Segment or SGL Segment descriptor",
        0x0E => "Invalid Number of SGL Descriptors: There is an SGL Last Segment descriptor or an SGL Segment descriptor in a location other than the last descriptor of a segment based on the length indicated",
        0x0F => "Data SGL Length Invalid: The length of a Data SGL is too short or too long and the controller does not support SGL transfers longer than the amount of data to be transferred",
        0x10 => "Metadata SGL Length Invalid: The length of a Metadata SGL is too short or too long and the controller does not support SGL transfers longer than the amount of data to be transferred",
        0x11 => "SGL Descriptor Type Invalid: The type of an SGL Descriptor is a type that is not supported by the controller",
        0x12 => "Invalid Use of Controller Memory Buffer: The attempted use of the Controller Memory Buffer is not supported by the controller",
        0x13 => "PRP Offset Invalid: The Offset field for a PRP entry is invalid",
        0x14 => "Atomic Write Unit Exceeded: The length specified exceeds the atomic write unit size",
        0x15 => "Operation Denied: The command was denied due to lack of access rights",
        0x16 => "SGL Offset Invalid: The offset specified in a descriptor is invalid",
        0x18 => "Host Identifier Inconsistent Format: The NVM subsystem detected the simultaneous use of 64- bit and 128-bit Host Identifier values on different controllers",
        0x19 => "Keep Alive Timer Expired: The Keep Alive Timer expired",
        0x1A => "Keep Alive Timeout Invalid: The Keep Alive Timeout value specified is invalid",
        0x1B => "Command Aborted due to Preempt and Abort: The command was aborted due to a Reservation Acquire command",
        0x1C => "Sanitize Failed: The most recent sanitize operation failed and no recovery action has been successfully completed",
        0x1D => "Sanitize In Progress: The requested function is prohibited while a sanitize operation is in progress",
        0x1E => "SGL Data Block Granularity Invalid: The Address alignment or Length granularity for an SGL Data Block descriptor is invalid",
        0x1F => "Command Not Supported for Queue in CMB: The controller does not support Submission Queue in the Controller Memory Buffer or Completion Queue in the Controller Memory Buffer",
        0x20 => "Namespace is Write Protected: The command is prohibited while the namespace is write protected",
        0x21 => "Command Interrupted: Command processing was interrupted and the controller is unable to successfully complete the command",
        0x22 => "Transient Transport Error: A transient transport error was detected",
        0x80 => "LBA Out of Range: The command references an LBA that exceeds the size of the namespace",
        0x81 => "Capacity Exceeded: Execution of the command has caused the capacity of the namespace to be exceeded",
        0x82 => "Namespace Not Ready: The namespace is not ready to be accessed",
        0x83 => "Reservation Conflict: The command was aborted due to a conflict with a reservation held on the accessed namespace",
        0x84 => "Format In Progress: A Format NVM command is in progress on the namespace",
        _ => UNRECOGNIZED,
    }
}

fn command_specific(sc: u8) -> &'static str {
    match sc {
        0x00 => "Completion Queue Invalid: The Completion Queue identifier specified in the command does not exist",
        0x01 => "Invalid Queue Identifier: The creation of the I/O Completion Queue failed due to an invalid queue identifier specified as part of the command",
        0x02 => "Invalid Queue Size: The host attempted to create an I/O Completion Queue with an invalid number of entries",
        0x03 => "Abort Command Limit Exceeded: The number of concurrently outstanding Abort commands has exceeded the limit indicated in the Identify Controller data structure",
        0x05 => "Asynchronous Event Request Limit Exceeded: The number of concurrently outstanding Asynchronous Event Request commands has been exceeded",
        0x06 => "Invalid Firmware Slot: The firmware slot indicated is invalid or read only",
        0x07 => "Invalid Firmware Image: The firmware image specified for activation is invalid and not loaded by the controller",
        0x08 => "Invalid Interrupt Vector: The creation of the I/O Completion Queue failed due to an invalid interrupt vector specified as part of the command",
        0x09 => "Invalid Log Page: The log page indicated is invalid",
        0x0A => "Invalid Format: The LBA Format specified is not supported",
        0x0C => "Invalid Queue Deletion: Invalid I/O Completion Queue specified to delete",
        0x0D => "Feature Identifier Not Saveable: The Feature Identifier specified does not support a saveable value",
        0x0E => "Feature Not Changeable: The Feature Identifier is not able to be changed",
        0x0F => "Feature Not Namespace Specific: The Feature Identifier specified is not namespace specific",
        0x1D => "Device Self-test In Progress: The controller or NVM subsystem already has a device self-test operation in process",
        0x24 => "ANA Group Identifier Invalid: The specified ANA Group Identifier (ANAGRPID) is not supported in the submitted command",
        0x25 => "ANA Attach Failed: The controller is not attached to the namespace as a result of an ANA condition",
        _ => UNRECOGNIZED,
    }
}

fn nvm_specific(sc: u8) -> &'static str {
    match sc {
        0x80 => "Conflicting Attributes: The attributes specified in the command are conflicting",
        0x81 => "Invalid Protection Information: The command's Protection Information Field settings are invalid for the namespace's Protection Information format",
        0x82 => "Attempted Write to Read Only Range: The LBA range specified contains read-only blocks",
        0x83 => "Command Size Limit Exceeded",
        _ => UNRECOGNIZED,
    }
}

fn fabrics_specific(sc: u8) -> &'static str {
    match sc {
        0x80 => "Incompatible Format: The NVM subsystem does not support the record format specified by the host",
        0x81 => "Controller Busy: The controller is already associated with a host",
        0x82 => "Connect Invalid Parameters: One or more of the command parameters",
        0x83 => "Connect Restart Discovery: The NVM subsystem requested is not available",
        0x84 => "Connect Invalid Host: The host is not allowed to establish an association to either any controller in the NVM subsystem or the specified controller",
        0x85 => "Invalid Queue Type: The command was sent on the wrong queue type",
        0x90 => "Discover Restart: The snapshot of the records is now invalid or out of date",
        0x91 => "Authentication Required: NVMe in-band authentication is required and the queue has not yet been authenticated",
        _ => UNRECOGNIZED,
    }
}

fn media(sc: u8) -> &'static str {
    match sc {
        0x80 => "Write Fault: The write data could not be committed to the media",
        0x81 => "Unrecovered Read Error: The read data could not be recovered from the media",
        0x82 => "End-to-end Guard Check Error: The command was aborted due to an end-to-end guard check failure",
        0x83 => "End-to-end Application Tag Check Error: The command was aborted due to an end-to-end application tag check failure",
        0x84 => "End-to-end Reference Tag Check Error: The command was aborted due to an end-to-end reference tag check failure",
        0x85 => "Compare Failure: The command failed due to a miscompare during a Compare command",
        0x86 => "Access Denied: Access to the namespace and/or LBA range is denied due to lack of access rights",
        0x87 => "Deallocated or Unwritten Logical Block: The command failed due to an attempt to read from or verify an LBA range containing a deallocated or unwritten logical block",
        0x88 => "End-to-End Storage Tag Check Error: The command was aborted due to an end-to-end storage tag check failure",
        _ => UNRECOGNIZED,
    }
}

fn path(sc: u8) -> &'static str {
    match sc {
        0x00 => "Internal Path Error: An internal error specific to the controller processing the command prevented completion",
        0x01 => "Asymmetric Access Persistent Loss: The controller is in a persistent loss state with the requested namespace",
        0x02 => "Asymmetric Access Inaccessible: The controller is in an inaccessible state with the requested namespace",
        0x03 => "Asymmetric Access Transition: The controller is currently transitioning states with the requested namespace",
        0x60 => "Controller Pathing Error: A pathing error was detected by the controller",
        0x70 => "Host Pathing Error: A pathing error was detected by the host",
        0x71 => "Command Aborted By Host: The command was aborted as a result of host action",
        _ => UNRECOGNIZED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme::{GenericStatus, MediaStatus};

    #[test]
    fn lines_as_nvme_cli_prints_them() {
        // nvme-cli 2.3 against Linux nvmet (tests/interop's nvme-cli group): a read
        // past the end, Internal Error with More and DNR.
        let s = Status::generic(GenericStatus::InternalError)
            .with_more()
            .with_dnr();
        assert_eq!(
            status_line(&s, false),
            "NVMe status: Internal Error: The command was not completed successfully due to an internal error(0x6006)"
        );
        let s = Status::generic(GenericStatus::InvalidField).with_dnr();
        assert_eq!(
            status_line(&s, false),
            "NVMe status: Invalid Field in Command: A reserved coded value or an unsupported value in a defined field(0x4002)"
        );
        let s = Status::media(MediaStatus::CompareFailure).with_dnr();
        assert_eq!(status_value(&s), 0x4285);
        assert!(status_line(&s, false).contains("Compare Failure: "));
        let s = Status::new(StatusCodeType::CommandSpecific, 0x84);
        assert!(description(&s, true).starts_with("Connect Invalid Host"));
        assert!(description(&s, false).starts_with("unrecognized"));
        assert_eq!(
            description(&Status::new(StatusCodeType::Reserved5, 1), false),
            "Unknown status"
        );
    }
}
